"""Opening a store: the checks before anything writes, the engines, the migrations.

A SQLite file is refused when its directory is missing, read-only, or the path is a
directory, and checked (store/integrity.py) before the writer switches it to WAL; a
PostgreSQL database needs the optional psycopg driver and is migrated under an advisory
lock (store/migrate.py). Either way a failure leaves a ``StoreError`` naming the store, and
no engine behind.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.exc import DatabaseError, OperationalError

from state_machines import StoreError
from store import ops
from store.engine import EngineSettings, Synchronous, make_read_engine, make_write_engine
from store.integrity import IntegrityCheck, check_database_file
from store.location import Backend, StoreLocation
from store.migrate import upgrade_to_head
from store.retry import retry_on_lock


@dataclass(frozen=True)
class StoreOptions:
    synchronous: Synchronous = Synchronous.FULL
    # Total time a write (or the open) keeps retrying a lock held by another process.
    lock_timeout_s: float = 10.0
    busy_timeout_ms: int = 200
    integrity_check: IntegrityCheck = IntegrityCheck.QUICK
    max_attempts: int = ops.DEFAULT_MAX_ATTEMPTS
    read_pool_size: int = 8
    # PostgreSQL: the server ends a write transaction its client has left idle this long
    # (the client stopped, or its network went), so its row locks do not hold up the other
    # nodes. A node sets it to its lease (control_plane/assembly.py): a writer idle that
    # long could not have renewed the lease either, so its writes would be refused anyway.
    stalled_write_s: float = 15.0


def open_engines(location: StoreLocation, options: StoreOptions) -> tuple[Engine, Engine]:
    """The write and read engines of a store that is ready: checked, created, migrated."""
    if location.backend is Backend.POSTGRESQL:
        return _postgres_engines(location, options)
    return _sqlite_engines(location, options)


def _sqlite_engines(location: StoreLocation, options: StoreOptions) -> tuple[Engine, Engine]:
    path = location.target
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise StoreError(f"directory {parent} does not exist; create it first", path=path)
    if os.path.isdir(path):
        raise StoreError(
            f"{path} is a directory; --db names the store file itself "
            f"(e.g. {os.path.join(path, 'acpctl.db')})",
            path=path,
        )
    if os.statvfs(parent).f_flag & os.ST_RDONLY:
        raise StoreError(
            f"{parent} is on a read-only file system; a store needs to write its file and "
            "the -wal and -shm files beside it: put it on writable storage",
            path=path,
        )
    check_database_file(path, options.integrity_check)
    settings = EngineSettings(
        synchronous=options.synchronous,
        busy_timeout_ms=options.busy_timeout_ms,
        read_pool_size=options.read_pool_size,
    )
    write_engine = make_write_engine(path, settings)
    read_engine = make_read_engine(path, settings)

    def prepare() -> None:
        # The writer's connect hook switches the file to WAL; do it before any reader
        # connects, so no pooled reader starts out in rollback-journal mode.
        write_engine.connect().close()
        upgrade_to_head(write_engine, read_engine)

    _prepared(prepare, write_engine, read_engine, location, options)
    return write_engine, read_engine


def _postgres_engines(location: StoreLocation, options: StoreOptions) -> tuple[Engine, Engine]:
    try:
        import psycopg  # noqa: F401  (the optional ``postgres`` extra)
    except ImportError:
        raise StoreError(
            f"cannot open {location.display}: PostgreSQL needs psycopg 3; install "
            "acp-control-plane[postgres]",
            path=location.display,
        ) from None
    from store import pg_engine

    settings = EngineSettings(
        synchronous=options.synchronous,
        busy_timeout_ms=max(options.busy_timeout_ms, 1000),
        read_pool_size=options.read_pool_size,
        stalled_write_ms=int(options.stalled_write_s * 1000),
    )
    write_engine = pg_engine.make_write_engine(location.target, settings)
    read_engine = pg_engine.make_read_engine(location.target, settings)

    def prepare() -> None:
        upgrade_to_head(write_engine, read_engine, location)

    _prepared(prepare, write_engine, read_engine, location, options)
    return write_engine, read_engine


def _prepared(
    prepare: Callable[[], None],
    write_engine: Engine,
    read_engine: Engine,
    location: StoreLocation,
    options: StoreOptions,
) -> None:
    """Run ``prepare`` through lock retries; on failure dispose of both engines and raise
    a ``StoreError`` naming the store (the driver's error as its cause)."""
    try:
        retry_on_lock(prepare, options.lock_timeout_s, location.display)
    except BaseException as exc:
        write_engine.dispose()
        read_engine.dispose()
        if isinstance(exc, (OperationalError, DatabaseError)):
            raise StoreError(
                f"cannot open store {location.display}: {exc.orig or exc}",
                path=location.display,
            ) from exc
        raise
