"""What a driver error means for the store: a lock or I/O fault that dooms one transaction
(``StoreUnavailable``, retryable), damage to the file (``StoreDamaged``), or one write's own
error.

Damage:

SQLite reports a truncated file or overwritten pages only when a statement touches them
("database disk image is malformed", "file is not a database"), as a plain
``sqlite3.DatabaseError`` (SQLAlchemy wraps it in ``sqlalchemy.exc.DatabaseError``). Without
this, a host calling ``wait()`` or ``get()`` got the raw driver error; with it, every read and
write path raises the control plane's own typed error, with what an operator should do.
Lock errors and constraint violations are not damage and pass through untouched.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DatabaseError

from state_machines.errors import StoreDamaged, StoreError, StoreUnavailable
from store.retry import is_locked_error, pg_error, pg_sqlstate

_DAMAGE = ("malformed", "file is not a database", "database corrupt")


def driver_error_text(exc: BaseException) -> str:
    if isinstance(exc, DatabaseError) and exc.orig is not None:
        return str(exc.orig)
    return str(exc)


def is_damage(exc: BaseException) -> bool:
    if not isinstance(exc, sqlite3.DatabaseError | DatabaseError):
        return False
    if isinstance(exc, sqlite3.IntegrityError) or (
        isinstance(exc, DatabaseError) and isinstance(exc.orig, sqlite3.IntegrityError)
    ):
        return False
    text = driver_error_text(exc).lower()
    return any(marker in text for marker in _DAMAGE)


def as_damaged(exc: BaseException, path: str) -> StoreDamaged:
    err = StoreDamaged(
        f"the store file {path} is damaged ({driver_error_text(exc)}): stop every process "
        "using it, keep a copy of the file with its -wal beside it, then restore a backup or "
        "salvage with `sqlite3 FILE .recover` (docs/store.md)",
        path=path,
    )
    err.__cause__ = exc
    return err


@contextmanager
def damage_as_store_error(path: str) -> Iterator[None]:
    """Inside, a damage error of the driver leaves as ``StoreDamaged``."""
    try:
        yield
    except (DatabaseError, sqlite3.DatabaseError) as exc:
        if not is_damage(exc):
            raise
        raise as_damaged(exc, path) from exc


def own_copy(error: StoreError) -> StoreError:
    """One error per refused write: raising a shared instance in every caller's thread would
    chain all their tracebacks onto it (and keep their frames alive)."""
    copy = type(error)(str(error), path=error.path)
    copy.__cause__ = error.__cause__
    return copy


def is_disconnect(exc: BaseException) -> bool:
    """PostgreSQL: the connection itself is gone or unusable (server restart, network cut,
    the server ending an idle transaction). The writer replaces it before the next group."""
    error = pg_error(exc)
    if error is None:
        return False
    state: str | None = getattr(error, "sqlstate", None)
    if state is None:  # raised by the client library: no server answer at all
        return type(error).__name__ in ("OperationalError", "InterfaceError")
    # 08: connection exception; 57P0x: server shutting down or crashed; 25P03: the server
    # ended our idle transaction.
    return state.startswith("08") or state.startswith("57P") or state == "25P03"


def is_connection_level(exc: BaseException) -> bool:
    """Errors that doom the whole transaction (lock, I/O), as opposed to one write's error."""
    if is_locked_error(exc) or is_damage(exc) or is_disconnect(exc):
        return True
    state = pg_sqlstate(exc)
    if state is not None:
        # 53: out of disk, memory or connections; 58: I/O error on the server.
        return state.startswith("53") or state.startswith("58")
    text = str(exc).lower()
    return "disk i/o error" in text or "database or disk is full" in text


def as_unavailable(exc: BaseException, path: str) -> StoreUnavailable:
    """A whole batch failed (not one write's own error): the lock, the disk, I/O."""
    if isinstance(exc, StoreUnavailable):
        return exc
    err = StoreUnavailable(f"write to {path} failed: {exc}", path=path)
    err.__cause__ = exc
    return err
