"""Processes as /proc shows them: start times, children, descendants, and the parent side's
look-ups for an agent's process tree (its process group; what a crash left behind).

Standard library only, and none of the slow-to-import modules: ``protocol.agent.reaper`` (which
starts before every agent) uses it too.
"""

from __future__ import annotations

import functools
import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
else:
    import _signal as signal  # ``signal`` costs ~4 ms for its enums; same names and ints

MARKER_ENV = "ACP_REAPER_ID"
"""Put in each agent's environment by its reaper: ``"<reaper pid>.<reaper start time>"``."""


# -- /proc -------------------------------------------------------------------------------


class _Stat:
    """Fields 3 (state), 4 (ppid), 5 (pgrp), 6 (session), 14 + 15 (utime + stime, in clock
    ticks) and 22 (starttime) of proc(5)."""

    __slots__ = ("cpu_ticks", "pgrp", "ppid", "session", "start", "state")

    def __init__(self, fields: list[bytes]) -> None:
        self.state = fields[0].decode()
        self.ppid = int(fields[1])
        self.pgrp = int(fields[2])
        self.session = int(fields[3])
        self.cpu_ticks = int(fields[11]) + int(fields[12])
        self.start = int(fields[19])


def _stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    return _Stat(raw[raw.rfind(b")") + 2 :].split())


def process_start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (field 22 of /proc/PID/stat, clock ticks since boot),
    or None if there is no such process. With the pid it names one process across pid reuse.
    A zombie (dead, not yet reaped) still has one."""
    st = _stat(pid) if pid > 0 else None
    return None if st is None else st.start


def parent_pid(pid: int) -> int | None:
    """The parent of process ``pid`` (field 4 of /proc/PID/stat), or None if it is gone."""
    st = _stat(pid) if pid > 0 else None
    return None if st is None else st.ppid


def _alive(pid: int, start: int) -> bool:
    st = _stat(pid)
    return st is not None and st.start == start and st.state != "Z"


def _children(pid: int) -> list[int]:
    """The direct children of process ``pid`` (of all its threads); [] if it is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return []
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                out.extend(int(c) for c in fh.read().split())
        except FileNotFoundError:
            if not _HAS_CHILDREN_FILE:
                return [p for p, st in _all_stats() if st.ppid == pid]
        except ProcessLookupError:
            pass
    return out


def _all_stats() -> list[tuple[int, _Stat]]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                out.append((int(name), st))
    return out


_HAS_CHILDREN_FILE = os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def descendants(root: int) -> list[int]:
    """Every process below ``root``, parents before their children."""
    found: list[int] = []
    todo = [root]
    seen = {root}
    while todo:
        for child in _children(todo.pop()):
            if child not in seen:
                seen.add(child)
                found.append(child)
                todo.append(child)
    return found


_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """The CPU time process ``pid`` used so far, user and system, all its threads; None if
    it is gone."""
    st = _stat(pid)
    return None if st is None else st.cpu_ticks / _TICKS_PER_S


def tree_cpu(root: int) -> dict[int, float] | None:
    """The CPU time ``root`` and every live process below it used so far, by pid; None if
    ``root`` is gone. (A process that exited is not in it: compare two with
    ``cpu_used_between``, not their sums.)"""
    own = cpu_seconds(root)
    if own is None:
        return None
    found = {root: own}
    for pid in descendants(root):
        used = cpu_seconds(pid)
        if used is not None:
            found[pid] = used
    return found


def cpu_used_between(before: dict[int, float], after: dict[int, float]) -> float:
    """The CPU time a tree's live processes used between two ``tree_cpu`` readings (a process
    that exited meanwhile counts for nothing, one that started counts whole)."""
    return sum(max(0.0, used - before.get(pid, 0.0)) for pid, used in after.items())


def _environ_has(pid: int, entry: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return entry in fh.read().split(b"\0")
    except OSError:
        return False


# -- the parent side -------------------------------------------------------------------------------


def agent_pgid_of(reaper_pid: int, timeout_s: float = 1.0) -> int | None:
    """The agent's pid, which is also its process group id: the reaper's child that leads its
    own group in the reaper's session (the earliest started one, should orphans that made
    groups of their own have been re-parented to the reaper already). None if the reaper is
    gone or shows no such child within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        reaper = _stat(reaper_pid)
        if reaper is None or reaper.state == "Z":
            return None
        best: tuple[int, int] | None = None
        for child in _children(reaper_pid):
            st = _stat(child)
            if st is not None and st.pgrp == child and st.session == reaper.session:
                best = min(best or (st.start, child), (st.start, child))
        if best is not None:
            return best[1]
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.002)


def kill_leftover_tree(
    reaper_pid: int, reaper_start: int, pgid: int | None, *, wait_s: float = 2.0
) -> int:
    """Recovery after a crash of an earlier control-plane process that ran a reaper.

    If the reaper (``reaper_pid`` with start time ``reaper_start``) still runs, it gets
    SIGTERM (it then kills its tree) and up to ``wait_s`` to exit, else SIGKILL. Then every
    process left that started at or after ``reaper_start`` and is in process group ``pgid``
    or carries the reaper's :data:`MARKER_ENV` in its environment is SIGKILLed, until none is
    left (bounded by ``wait_s``). Process 1, this process and members of this process's own
    group are never signalled. Returns how many distinct processes were signalled."""
    me, my_pgrp = os.getpid(), os.getpgrp()
    signalled: set[int] = set()

    def send(pid: int, signo: int) -> None:
        if pid > 1 and pid != me:
            try:
                os.kill(pid, signo)
            except (ProcessLookupError, PermissionError):
                return
            signalled.add(pid)

    if reaper_pid > 1 and reaper_pid != me and _alive(reaper_pid, reaper_start):
        send(reaper_pid, signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        while _alive(reaper_pid, reaper_start) and time.monotonic() < deadline:
            time.sleep(0.002)
        if _alive(reaper_pid, reaper_start):
            send(reaper_pid, signal.SIGKILL)
    marker = f"{MARKER_ENV}={reaper_pid}.{reaper_start}".encode()
    deadline = time.monotonic() + wait_s
    while True:
        victims = [
            pid
            for pid, st in _all_stats()
            if st.start >= reaper_start
            and st.state != "Z"
            and pid > 1
            and pid != me
            and st.pgrp != my_pgrp
            and ((pgid is not None and st.pgrp == pgid) or _environ_has(pid, marker))
        ]
        if not victims or time.monotonic() >= deadline:
            return len(signalled)
        for pid in victims:
            send(pid, signal.SIGKILL)
        time.sleep(0.002)


@functools.cache
def boot_id() -> str | None:
    """This boot's id: a pid and start time identify a process only within one boot."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return None
