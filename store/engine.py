"""SQLite engine set-up: every pragma in one place, each with its reason.

Two engines share one file: the *write* engine has a single connection owned by the writer
thread and opens every transaction with ``BEGIN IMMEDIATE`` (the write lock is taken up front,
so a transaction never fails half-way on a lock upgrade); the *read* engine pools connections
for any thread and opens deferred transactions (WAL readers never block the writer).

Python's ``sqlite3`` driver begins transactions on its own; SQLAlchemy's documented pysqlite
recipe turns that off (``isolation_level=None``) and emits ``BEGIN`` from the ``begin`` event,
which is what makes SAVEPOINT (per-write isolation inside a group commit) work too.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import QueuePool, StaticPool


class Synchronous(StrEnum):
    FULL = "FULL"  # fsync at every commit: a committed write survives a power cut
    NORMAL = "NORMAL"  # fsync at checkpoints only: survives a process crash, not a power cut


@dataclass(frozen=True)
class EngineSettings:
    synchronous: Synchronous = Synchronous.FULL
    # Short on purpose: SQLite's own wait is a busy loop without jitter; longer waits go
    # through the tenacity retry in store/retry.py, which backs off with jitter.
    busy_timeout_ms: int = 200
    read_pool_size: int = 8
    stalled_write_ms: int = 15000  # PostgreSQL only: see StoreOptions.stalled_write_s


def _apply_pragmas(dbapi_conn: sqlite3.Connection, settings: EngineSettings, write: bool) -> None:
    cur = dbapi_conn.cursor()
    try:
        # WAL: readers never block the writer and the writer never blocks readers.
        # (Persistent in the file; setting it again is a no-op.)
        if write:
            # Pages that retention frees go back to the file system (``PRAGMA
            # incremental_vacuum``). Only a new, empty file takes it, and only before WAL
            # writes its header; an older store keeps its mode until one ``VACUUM``
            # (``acpctl gc --compact``). Set on an empty file only: the pragma writes the
            # header even when the mode is already the one asked for.
            if cur.execute("PRAGMA page_count").fetchone()[0] == 0:
                cur.execute("PRAGMA auto_vacuum=INCREMENTAL")
            cur.execute("PRAGMA journal_mode=WAL")
        # Durability level: FULL by default (commands must survive power loss).
        cur.execute(f"PRAGMA synchronous={settings.synchronous.value}")
        # Wait this long inside SQLite before reporting "database is locked".
        cur.execute(f"PRAGMA busy_timeout={int(settings.busy_timeout_ms)}")
        # Bindings, commands and events must point at real sessions.
        cur.execute("PRAGMA foreign_keys=ON")
    finally:
        cur.close()


def _make_engine(url: str, settings: EngineSettings, write: bool) -> Engine:
    pool_args: dict[str, Any]
    if write:
        # One connection, one owner thread: the group-commit writer.
        pool_args = {"poolclass": StaticPool}
    else:
        pool_args = {
            "poolclass": QueuePool,
            "pool_size": settings.read_pool_size,
            "max_overflow": settings.read_pool_size,
        }
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "isolation_level": None},
        **pool_args,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        _apply_pragmas(dbapi_conn, settings, write)

    begin_sql = "BEGIN IMMEDIATE" if write else "BEGIN"

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # The group-commit writer opens its transaction on the driver connection itself;
        # SQLAlchemy's autobegin inside it must not try to open a second one.
        if not conn.connection.driver_connection.in_transaction:
            conn.exec_driver_sql(begin_sql)

    return engine


def make_write_engine(path: str, settings: EngineSettings) -> Engine:
    return _make_engine(f"sqlite:///{path}", settings, write=True)


def make_read_engine(path: str, settings: EngineSettings) -> Engine:
    return _make_engine(f"sqlite:///{path}", settings, write=False)


def async_url(path: str) -> str:
    return f"sqlite+aiosqlite:///{path}"
