"""What this machine offers the tests' PostgreSQL servers: where the server binaries are,
and clean-up after test processes that died without stopping their servers.

A test process killed with ``kill -9`` cannot take its postmaster with it (postgres has no
parent-death option), so every server directory records its owner's pid (``owner.pid``) and
its postmaster's (``postmaster.pid``); each ``PostgresServer.start()`` reaps the directories
of dead owners (tests/support/postgres.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

MISSING_REASON = (
    "PostgreSQL server binaries not found: apt-get install postgresql (or set ACPCTL_PG_BIN)"
)
_REQUIRED = ("initdb", "pg_ctl", "postgres")
PREFIX = "acpctl-pg-"
STOP_TIMEOUT_S = 10.0
# A directory without owner.pid younger than this is still being set up by its owner
# (mkdtemp comes a moment before the pid is written): leave it alone.
_SETUP_GRACE_S = 60.0


def tmp_root() -> Path:
    # /tmp is world-traversable; $TMPDIR (what tempfile would pick) may not be, for nobody.
    tmp = Path("/tmp")
    return tmp if tmp.is_dir() else Path(tempfile.gettempdir())


def _proc_stat_state(pid: int) -> str | None:
    """The state letter of /proc/PID/stat, or None where there is no such file."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode(errors="replace")
    except OSError:
        return None
    # The command name in parentheses may hold spaces and parentheses itself.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[0] if fields else None


def _pid_alive(pid: int) -> bool:
    """Whether a process runs; a zombie (dead, not reaped: an orphaned postmaster whose new
    parent never reaps, as in some containers) counts as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _proc_stat_state(pid) != "Z"


def _read_pid(path: Path) -> int | None:
    try:
        first = path.read_text().split("\n", 1)[0].strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(first) if first.isdigit() else None


def _is_postmaster_of(pid: int, directory: Path) -> bool:
    """Whether PID is a postgres serving DIRECTORY's data: pids get reused, and the reaper
    must never signal a stranger."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return (
        bool(argv) and argv[0].endswith(b"postgres") and str(directory).encode() in b" ".join(argv)
    )


def _wait_dead(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _kill_postmaster(pid: int) -> None:
    """SIGQUIT is postgres's immediate shutdown: the postmaster takes its backends down and
    frees its shared memory; SIGKILL only where it does not go in time."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGQUIT)
    if not _wait_dead(pid, STOP_TIMEOUT_S):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_dead(pid, STOP_TIMEOUT_S)


def reap_stale(root: Path | None = None, keep: Path | None = None) -> list[Path]:
    """Remove the ``acpctl-pg-*`` directories of test processes that died without stopping
    their servers (killed -9, or the machine's earlier run): kill such a directory's
    postmaster if it still runs, then delete the directory. Returns the directories removed.

    A directory whose owner still runs is left alone even if its postmaster is dead: the
    owner may be between initdb and the postmaster's start, and will clean up itself.
    """
    removed: list[Path] = []
    for directory in (root or tmp_root()).glob(PREFIX + "*"):
        if directory == keep or not directory.is_dir() or directory.is_symlink():
            continue
        owner = _read_pid(directory / "owner.pid")
        if owner is None:
            try:
                age = time.time() - directory.stat().st_mtime
            except OSError:
                continue
            if age < _SETUP_GRACE_S:
                continue
        elif _pid_alive(owner):
            continue
        for record in (directory / "postmaster.pid", directory / "data" / "postmaster.pid"):
            pid = _read_pid(record)
            if pid is not None and _pid_alive(pid) and _is_postmaster_of(pid, directory):
                _kill_postmaster(pid)
        shutil.rmtree(directory, ignore_errors=True)
        if not directory.exists():
            removed.append(directory)
    return removed


def has_binaries(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in _REQUIRED)


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in path.name.split(".") if part.isdigit())


def find_server_binaries() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None.

    ``$ACPCTL_PG_BIN`` first (a developer's own build), then Debian's newest
    ``/usr/lib/postgresql/<ver>/bin`` (Debian keeps the server binaries off $PATH), then
    wherever ``initdb`` on $PATH really lives (``/usr/local/bin/initdb`` is a symlink, and
    ``postgres`` sits beside its target, not beside the link).
    """
    override = os.environ.get("ACPCTL_PG_BIN")
    if override:
        path = Path(override)
        return path if has_binaries(path) else None
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        versions = sorted(
            (p for p in debian.iterdir() if _version_key(p)), key=_version_key, reverse=True
        )
        for version in versions:
            if has_binaries(version / "bin"):
                return version / "bin"
    initdb = shutil.which("initdb")
    if initdb:
        path = Path(initdb).resolve().parent
        if has_binaries(path):
            return path
    return None
