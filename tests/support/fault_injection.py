"""The fault loop's faults and what it watches of the live process: the injector (the write
lock held from another process, the disk full, or both), the monitor of the live store's
refusals, and the handler that keeps the live process's warnings (tests/crash/test_fault_loop.py).
"""

from __future__ import annotations

import logging
import random
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from control_plane import (
    ControlPlane,
)
from tests.integration.test_storage_faults import HOLD_LOCK, _fill


def _truncate_wal(db: Path) -> bool:
    """Checkpoint the WAL into the database and truncate it (another connection, as an
    operator's ``sqlite3`` would): the store's next write then needs new space."""
    conn = sqlite3.connect(db, isolation_level=None, timeout=2.0)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return bool(busy == 0)
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


class FaultInjector(threading.Thread):
    """Until ``until`` (monotonic): a pause, then a fault: the write lock held by another
    process, the disk full, or both; each for a random time."""

    def __init__(self, seed: int, db: Path, disk: Path, until: float) -> None:
        super().__init__(name="fault-injector", daemon=True)
        self.rng = random.Random(seed)
        self.db, self.disk, self.until = db, disk, until
        self.stopping = threading.Event()
        self.active: set[str] = set()
        self.holds: list[float] = []  # seconds the lock was held, each time
        self.fulls: list[float] = []  # seconds the disk was full, each time
        self.both = 0
        self.wal_truncated = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        first = ["lock", "disk"]  # each kind at least once, whatever the draws
        try:
            while not self.stopping.wait(self.rng.uniform(0.3, 1.5)):
                if time.monotonic() >= self.until:
                    return
                (kind,) = self.rng.choices(("lock", "disk", "both"), weights=(0.45, 0.45, 0.1))
                kind = first.pop(0) if first else kind
                self._fault(kind, self.rng.uniform(0.2, 3.0), self.rng.random() < 0.5)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _fault(self, kind: str, hold: float, truncate: bool) -> None:
        filler: Path | None = None
        holder: subprocess.Popen[str] | None = None
        full_since = locked_since = 0.0
        try:
            if kind in ("disk", "both"):
                if truncate:  # else SQLite may go on in the WAL's old pages: the sinks fail
                    self.wal_truncated += _truncate_wal(self.db)
                filler = _fill(self.disk)
                full_since = time.monotonic()
                self.active.add("disk")
            if kind in ("lock", "both"):
                holder = subprocess.Popen(
                    [sys.executable, "-c", HOLD_LOCK, str(self.db), f"{hold:.3f}"],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert holder.stdout is not None
                assert holder.stdout.readline().strip() == "locked"
                locked_since = time.monotonic()
                self.active.add("lock")
            if holder is not None:
                assert holder.wait(hold + 30) == 0
                self.holds.append(time.monotonic() - locked_since)
                self.active.discard("lock")
            else:
                time.sleep(hold)
            self.both += kind == "both"
        finally:
            if holder is not None and holder.poll() is None:
                holder.kill()
                holder.wait(10)
            self.active.discard("lock")
            if filler is not None:
                filler.unlink(missing_ok=True)
                self.fulls.append(time.monotonic() - full_since)
                self.active.discard("disk")


class RefusalMonitor(threading.Thread):
    """How often, and how long, the live process's store refused every write."""

    def __init__(self, cp: ControlPlane) -> None:
        super().__init__(name="refusal-monitor", daemon=True)
        self.cp = cp
        self.stopping = threading.Event()
        self.episodes = 0
        self.refused_s = 0.0
        self.kinds: Counter[str] = Counter()

    def run(self) -> None:
        since: float | None = None
        while not self.stopping.wait(0.01):
            fault = self.cp.store_fault(0)
            now = time.monotonic()
            if fault is not None and since is None:
                since = now
                self.episodes += 1
                self.kinds["locked" if "locked" in str(fault) else "disk"] += 1
            elif fault is None and since is not None:
                self.refused_s += now - since
                since = None
        if since is not None:
            self.refused_s += time.monotonic() - since


class Warnings(logging.Handler):
    """The live process's warnings and errors, for the figures and a failure's report."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[tuple[float, str, str]] = []
        # A session actor that failed to handle a message: (message, exception type).
        self.actor_failures: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.records.append((time.monotonic(), record.name, message))
        if record.name == "actors.session.actor" and record.levelno >= logging.ERROR:
            exc = record.exc_info[1] if record.exc_info else None
            self.actor_failures.append((message, type(exc).__name__))

    def count(self, needle: str) -> int:
        return sum(needle in message for _, _, message in self.records)
