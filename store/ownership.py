"""Which process owns a session, and whether that owner is still alive.

An owner id is ``host:pid:start`` where ``start`` is the process start time from
``/proc/<pid>/stat``: a pid reused by an unrelated process after a crash has another start
time, so it is not mistaken for the old owner. SQLite stores are local files, so liveness is
checked on this host; an owner on another host is treated as alive (never stolen).
"""

from __future__ import annotations

import functools
import os
import socket


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # Field 22 (starttime), counted after the parenthesised command name, which may hold spaces.
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 20 or fields[0] == b"Z":
        return None  # gone, or a zombie: dead for our purpose
    return fields[19].decode()


@functools.cache
def _owner_of(pid: int) -> str:
    return f"{socket.gethostname()}:{pid}:{_start_time(pid) or '0'}"


def this_owner() -> str:
    """This process's owner id (keyed by pid, so a forked child gets its own)."""
    return _owner_of(os.getpid())


def owner_alive(owner: str | None) -> bool:
    if not owner:
        return False
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname():
        return True
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    current = _start_time(pid)
    return current is not None and current == start
