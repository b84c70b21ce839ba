"""A SQLite store's space on disk: what the file holds and what is free, giving freed
pages back after retention deleted rows, and the one-time compaction of an older store.

SQLite does not shrink a file when rows are deleted: their pages go on the freelist and
later writes reuse them. A store created with ``auto_vacuum = INCREMENTAL`` (every store
from migration 0012 on) can give free pages back to the file system a few at a time
(``ops.retention.incremental_vacuum``, in short write transactions); the file shrinks
when the WAL is checkpointed. An older store (``auto_vacuum = NONE``) cannot, until one
``VACUUM`` rewrites it with the setting (``compact``), which needs the store to itself.
PostgreSQL reclaims space by autovacuum: nothing here applies to it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from state_machines import StoreError

_AUTO_VACUUM = {0: "none", 1: "full", 2: "incremental"}


class StoreBusy(StoreError):
    """The operation needs the store to itself and another process has it open."""


@dataclass(frozen=True)
class SqliteSpace:
    """The file's figures: its size and its WAL's, its pages and the free ones."""

    file_bytes: int
    wal_bytes: int
    page_size: int
    page_count: int
    free_pages: int
    auto_vacuum: str  # none, full or incremental

    @property
    def free_bytes(self) -> int:
        return self.free_pages * self.page_size

    def to_json(self) -> dict[str, Any]:
        return {
            "fileBytes": self.file_bytes,
            "walBytes": self.wal_bytes,
            "freeBytes": self.free_bytes,
            "pageSize": self.page_size,
            "autoVacuum": self.auto_vacuum,
        }


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def sqlite_space(conn: Connection, path: str) -> SqliteSpace:
    """The store's figures, read on ``conn`` (a reader: one snapshot) and from the files."""

    def pragma(name: str) -> int:
        return int(conn.exec_driver_sql(f"PRAGMA {name}").scalar_one())

    return SqliteSpace(
        file_bytes=_size(path),
        wal_bytes=_size(path + "-wal"),
        page_size=pragma("page_size"),
        page_count=pragma("page_count"),
        free_pages=pragma("freelist_count"),
        auto_vacuum=_AUTO_VACUUM.get(pragma("auto_vacuum"), "none"),
    )


class Checkpointer:
    """A connection of its own that copies the WAL into the file now, without waiting on
    anyone (``PASSIVE``: it never blocks a writer). Run between two deletion transactions,
    it keeps the WAL short, so the writer's own automatic checkpoint (which runs on the
    writer thread, in front of everyone's next write) seldom comes; run at the end, it lets
    the file shrink by what an incremental vacuum gave back now rather than later."""

    def __init__(self, path: str) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)

    def passive(self) -> None:
        # Busy: the writer's automatic checkpoints will do it.
        with contextlib.suppress(sqlite3.OperationalError):
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def close(self) -> None:
        self._conn.close()


def compact(path: str) -> None:
    """Rewrite the store with ``auto_vacuum = INCREMENTAL`` (one ``VACUUM``), so that its
    free pages go back to the file system and later deletions can give theirs back too.
    Needs the store to itself: the exclusive lock is taken first, without waiting, and
    ``StoreBusy`` says so when another process has the store open (``VACUUM`` would hold
    the write lock for the whole rewrite, and the other process's writes would fail)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        # In WAL mode an exclusive locking mode takes the file's lock for good, and only
        # when no other connection has the file open: the test that we are alone.
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        try:
            conn.execute("BEGIN EXCLUSIVE")
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            raise StoreBusy(
                f"compaction needs the store to itself, and another process has it open "
                f"({exc}): stop every acpctl serve, batch or other process using it, then "
                "run 'acpctl gc --compact' again",
                path=path,
            ) from None
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("VACUUM")
        # VACUUM wrote the whole file into the WAL: back into the file, and the WAL emptied.
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
