"""A test agent with a process tree: ``python tree_agent.py PIDFILE SIDEFILE DELAY [MODE]``.

It starts a child, a grandchild in a new session (``setsid``) and a double-forked daemon
(``setsid`` and fork again, its parent exits). Each appends its pid to PIDFILE at once, then,
after DELAY seconds, appends a line to SIDEFILE (the side effect), then sleeps long. The
agent itself writes its pid first and, once the four others wrote theirs (five lines), does
what MODE says: ``echo`` (the default) echoes stdin to stdout line by line, byte for byte,
until EOF, then exits 0; ``sleep`` sleeps long; a number exits with that code.
"""

from __future__ import annotations

import os
import sys
import time


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode() + b"\n")
    finally:
        os.close(fd)


def _worker(name: str, pidfile: str, sidefile: str, delay: float) -> None:
    try:
        _append(pidfile, str(os.getpid()))
        time.sleep(delay)
        _append(sidefile, f"{name} {os.getpid()} ran")
        time.sleep(120)
    finally:
        os._exit(0)


def main() -> int:
    pidfile, sidefile, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
    mode = sys.argv[4] if len(sys.argv) > 4 else "echo"
    _append(pidfile, str(os.getpid()))
    if os.fork() == 0:
        _worker("child", pidfile, sidefile, delay)
    if os.fork() == 0:
        # A child whose own child is the grandchild in a new session; it sleeps on.
        if os.fork() == 0:
            os.setsid()
            _worker("grandchild", pidfile, sidefile, delay)
        _worker("middle", pidfile, sidefile, delay)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            _worker("daemon", pidfile, sidefile, delay)
        os._exit(0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(pidfile) as fh:
            if len(fh.read().split()) >= 5:
                break
        time.sleep(0.002)
    if mode == "sleep":
        time.sleep(120)
    if mode not in ("echo", "sleep"):
        return int(mode)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    for line in iter(stdin.readline, b""):
        stdout.write(line)
        stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
