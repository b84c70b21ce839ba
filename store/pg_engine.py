"""PostgreSQL engine set-up (psycopg 3), the counterpart of store/engine.py.

The same two engines as on SQLite, for the same reasons:

- the *write* engine: one connection, owned by the group-commit writer thread. Its
  transactions are ``SERIALIZABLE``. On SQLite every write transaction runs alone (``BEGIN
  IMMEDIATE``); the store's operations were written and tested under that guarantee (read a
  row, then write on what it said). Several control-plane nodes write to one PostgreSQL at
  once, and serializable isolation keeps the guarantee for them: a transaction whose reads
  another one invalidated fails with ``serialization_failure`` and the whole group is run
  again (store/retry.py), exactly as a SQLite group is run again after ``database is
  locked``.
- the *read* engine: a pool for any thread; each ``read`` is one ``REPEATABLE READ, READ
  ONLY`` transaction, the snapshot a SQLite reader gets in WAL mode.

The driver runs in autocommit mode and the store emits ``BEGIN`` itself (from the ``begin``
event, or the writer directly): the writer's fixed-SQL hot path opens and commits on the
driver connection, as it does on SQLite (store/writer.py), and SQLAlchemy's Core statements
run inside that transaction.
"""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import QueuePool

from store.engine import EngineSettings
from store.raw import flush_held

WRITE_BEGIN = "BEGIN ISOLATION LEVEL SERIALIZABLE"
READ_BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


def _connect_args(settings: EngineSettings, role: str) -> dict[str, Any]:
    # lock_timeout: a row lock held by another node's open transaction is waited for this
    # long, then the statement fails and the group is retried with backoff (tenacity), the
    # way SQLite's busy_timeout hands over to store/retry.py.
    options = f"-c lock_timeout={int(settings.busy_timeout_ms)}ms"
    # A node that stopped mid-transaction (SIGSTOP, a partition) must not hold row locks
    # for ever: the server ends its transaction after this long. The writer's is the
    # node's lease (a stopped writer's row locks would hold up the takeover of its sessions
    # past the lease, seen in the fleet test); a reader holds no row locks.
    idle_ms = settings.stalled_write_ms if role == "write" else 30000
    options += f" -c idle_in_transaction_session_timeout={idle_ms}"
    return {
        "application_name": f"acpctl-{role}-{os.getpid()}",
        "options": options,
        # Keep-alives: a connection to a node that vanished is noticed in seconds, not hours.
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "connect_timeout": 10,
    }


def _make_engine(url: str, settings: EngineSettings, write: bool) -> Engine:
    pool_size = 1 if write else settings.read_pool_size
    engine = create_engine(
        url,
        isolation_level="AUTOCOMMIT",
        poolclass=QueuePool,
        pool_size=pool_size,
        max_overflow=0 if write else settings.read_pool_size,
        # A connection the server closed (restart, failover) is replaced on checkout.
        pool_pre_ping=not write,
        connect_args=_connect_args(settings, "write" if write else "read"),
    )
    begin_sql = WRITE_BEGIN if write else READ_BEGIN

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        from psycopg.pq import TransactionStatus

        driver = conn.connection.driver_connection
        flush_held(driver)  # a BEGIN the writer held (store/raw.py ``later``) goes first
        if driver.info.transaction_status == TransactionStatus.IDLE:
            driver.execute(begin_sql)

    if write:
        # SQLAlchemy's statements run after what the writer held, never before it.
        @event.listens_for(engine, "before_cursor_execute")
        def _before_execute(conn: Any, *_args: Any) -> None:
            flush_held(conn.connection.driver_connection)

    return engine


def make_write_engine(url: str, settings: EngineSettings) -> Engine:
    return _make_engine(url, settings, write=True)


def make_read_engine(url: str, settings: EngineSettings) -> Engine:
    return _make_engine(url, settings, write=False)


def async_url(url: str) -> str:
    # SQLAlchemy picks psycopg's async connection class for the same driver name.
    return url


def migration_engine(url: str) -> Engine:
    """A plain READ COMMITTED engine for migrations: they run under an advisory lock taken
    first in their transaction, and must see what a node that migrated while they waited
    committed (a serializable snapshot would be from before the wait)."""
    from sqlalchemy.pool import NullPool

    return create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 10})
