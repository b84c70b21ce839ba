"""Per-session agent stderr log files: where they live, the cap on their size, and the tail
that goes into an ``agent_exited`` event. stderr goes to a file, never a pipe: an unread pipe
blocks the agent at about 64 KB.

The cap ("copytruncate"). The agent writes through a descriptor of its own, which the control
plane cannot swap, so the file is never renamed: when it grows past ``max_bytes``, its newest
``max_bytes // 2`` bytes are copied to ``<log>.1`` (replacing the older one) and the live file
is truncated to 0 in place. That works only because every writer's descriptor has
``O_APPEND``: each write then goes to the end of the file as it is *now*, so after the
truncate the agent's next line lands at offset 0. (Python's ``open(path, "ab")``, which both
``protocol/agent/connection.py`` and ``protocol/agent/prestart.py`` use for the agent's fd 2, is
``O_WRONLY | O_CREAT | O_APPEND``; without ``O_APPEND`` the agent would keep writing at its
old offset and leave a sparse file as large as before.) Bytes the agent writes in the instant
between the last read of the copy and the truncate are lost, as with any copytruncate.

Why half the cap: a cut copies what it keeps, so keeping ``max_bytes // 2`` costs at most half
a byte of copying per byte the agent writes, while the newest ``max_bytes // 2`` to
``1.5 * max_bytes`` of the log are always on disk (``.1``, then the live file). Disk per log is
bounded at about ``2 * max_bytes`` plus what the agent writes within one check interval: the
live file (``max_bytes`` plus that) and, during a cut, the old ``.1`` and the new one being
written (``<log>.1.tmp``, half the cap each).

Every live connection's log is checked by one thread of the process (``_Watcher``): one
``fstat`` per log every ``CHECK_INTERVAL_S``, and a cut, when one is due, on that thread (a
cut copies up to half the cap). Not on the protocol loop: the agent writes to the file
directly, so a check that waits for a loop busy with every session's frames (or stalled)
lets the file grow unbounded meanwhile, which CI saw (a 20 MiB burst went through whole). A
connection checks once more when it closes (``StderrLog.aclose``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from protocol.os_thread_name import name_this_thread

log = logging.getLogger(__name__)

TAIL_BYTES = 8192
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
# How often a live connection looks at its log's size (read at every check).
CHECK_INTERVAL_S = 1.0
_COPY_CHUNK = 1024 * 1024
_CATCH_UP_ROUNDS = 4
# A closing connection's last check: the loop's default executor also parks blocking waits
# (protocol/loop.py), which must not hold a cut back.
_CUTTER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stderr-log-cut")


def rotated_path(path: str) -> str:
    """Where the older, cut-off part of the log at ``path`` is kept."""
    return path + ".1"


def tail_lines(path: str, lines: int = 20) -> list[str]:
    """The last ``lines`` lines of the log (reads at most ``TAIL_BYTES`` from its end). Right
    after a cut the live file is short: the rest then comes from the end of ``<log>.1``."""
    data = _tail(path, TAIL_BYTES)
    if data is None:
        return []
    if len(data) < TAIL_BYTES:
        data = (_tail(rotated_path(path), TAIL_BYTES - len(data)) or b"") + data
    text = data.decode("utf-8", errors="replace")
    return [line[:500] for line in text.splitlines()[-lines:]]


def _tail(path: str, count: int) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - count))
            return fh.read(count)
    except OSError:
        return None


def cut(fd: int, path: str, max_bytes: int) -> bool:
    """Cut the log if it is over ``max_bytes``; whether it was cut. ``fd`` is open on ``path``
    for reading and writing; the agent's descriptors must have ``O_APPEND`` (module doc).

    The newest ``max_bytes // 2`` bytes go to ``<log>.1.tmp``, which then replaces ``<log>.1``
    (a reader sees the old ``.1`` or the new one, whole); what the agent wrote meanwhile is
    appended to it, and the live file is truncated right after that last read. ``OSError``
    when a step fails (the live file is then left as it was, or already truncated)."""
    size = os.fstat(fd).st_size
    if size <= max_bytes:
        return False
    pos = size - max(1, max_bytes // 2)
    rotated = rotated_path(path)
    tmp = rotated + ".tmp"
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        pos = _copy(fd, out, pos, size)
        os.replace(tmp, rotated)
        for _ in range(_CATCH_UP_ROUNDS):  # out still writes the new .1 after the rename
            end = os.fstat(fd).st_size
            if end <= pos:
                break
            pos = _copy(fd, out, pos, end)
        os.ftruncate(fd, 0)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(out)
    return True


def _copy(src: int, dst: int, pos: int, end: int) -> int:
    """Copy ``src[pos:end]`` to the end of ``dst``; returns where the copy stopped."""
    while pos < end:
        chunk = os.pread(src, min(_COPY_CHUNK, end - pos), pos)
        if not chunk:
            break
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view) :]
        pos += len(chunk)
    return pos


class StderrLog:
    """The cap on one agent's stderr log while a connection holds it: ``watch`` on the loop
    while the agent runs, ``aclose`` once it is gone (a last check, then the descriptor is
    closed). Inert when ``max_bytes`` is None or not positive, or ``path`` is not a regular
    file (``os.devnull``) or cannot be opened (the agent's own open reports that)."""

    def __init__(self, path: str, max_bytes: int | None) -> None:
        self.path = path
        self.max_bytes = max_bytes or 0
        self._lock = threading.Lock()
        self._fd: int | None = None
        if self.max_bytes <= 0:
            return
        try:
            # Our own descriptor on the agent's file, for fstat, pread and ftruncate.
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            log.warning("agent stderr log %s is not capped: %s", path, exc)
            return
        if stat.S_ISREG(os.fstat(fd).st_mode):
            self._fd = fd
        else:
            os.close(fd)

    @property
    def active(self) -> bool:
        return self._fd is not None

    def over(self) -> bool:
        """Whether the log is past its cap (one ``fstat``)."""
        fd = self._fd
        if fd is None:
            return False
        try:
            return os.fstat(fd).st_size > self.max_bytes
        except OSError:
            return False

    def check(self) -> bool:
        """Cut the log if it is past its cap (blocking: a copy of up to half the cap)."""
        with self._lock:
            if self._fd is None:
                return False
            try:
                return cut(self._fd, self.path, self.max_bytes)
            except OSError as exc:
                log.warning("could not cut agent stderr log %s: %s", self.path, exc)
                return False

    def _final(self) -> None:
        self.check()
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def watch(self) -> None:
        """Checked from now on every ``CHECK_INTERVAL_S`` by the process's watcher thread,
        until ``aclose``."""
        if self._fd is not None:
            _WATCHER.add(self)

    async def aclose(self) -> None:
        """A last check, then the descriptor closed. Both run on the cutter thread (a cut the
        watcher has under way finishes first: ``check`` holds the lock), and finish there
        even if this is cancelled."""
        _WATCHER.remove(self)
        if self._fd is not None:
            await asyncio.get_running_loop().run_in_executor(_CUTTER, self._final)


class _Watcher:
    """The thread that checks every watched log, started with the first one and ended when
    none is left (so a process with no agent has no such thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._logs: set[StderrLog] = set()
        self._running = False

    def add(self, stderr_log: StderrLog) -> None:
        with self._lock:
            self._logs.add(stderr_log)
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._run, name="stderr-log-watch", daemon=True).start()

    def remove(self, stderr_log: StderrLog) -> None:
        with self._lock:
            self._logs.discard(stderr_log)

    def _run(self) -> None:
        name_this_thread()
        while True:
            time.sleep(CHECK_INTERVAL_S)  # read each round: tests shorten it
            with self._lock:
                if not self._logs:
                    self._running = False
                    return
                watched = list(self._logs)
            for stderr_log in watched:
                try:
                    if stderr_log.over():
                        stderr_log.check()
                except Exception:  # one log's trouble must not end the watch of the others
                    log.exception("checking agent stderr log %s", stderr_log.path)


_WATCHER = _Watcher()
