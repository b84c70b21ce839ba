"""Retry of transient lock conflicts, and nothing else.

SQLite reports a lock held by another connection or process as ``OperationalError: database
is locked`` (or ``busy``). PostgreSQL reports the conflicts of concurrent nodes as
``serialization_failure`` (40001, serializable isolation: see store/pg_engine.py),
``deadlock_detected`` (40P01) or ``lock_not_available`` (55P03, past ``lock_timeout``); in
each case the transaction was rolled back and running it again is correct. Those are retried
with exponential backoff and jitter up to a total deadline, then surface as
``StoreUnavailable``. Every other error surfaces at once: retrying a constraint violation or
a corrupt page silently would hide a real fault.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, OperationalError
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from state_machines.errors import StoreUnavailable

T = TypeVar("T")

# PostgreSQL's SQLSTATEs for "another transaction got in the way; run yours again".
PG_CONFLICTS = frozenset({"40001", "40P01", "55P03"})


def pg_error(exc: BaseException) -> BaseException | None:
    """The psycopg error behind ``exc`` (wrapped by SQLAlchemy or raised by the driver
    straight from the hot path), or None. psycopg is an optional dependency: recognised by
    its module, never imported here."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig
    return exc if type(exc).__module__.partition(".")[0] == "psycopg" else None


def pg_sqlstate(exc: BaseException) -> str | None:
    error = pg_error(exc)
    return None if error is None else getattr(error, "sqlstate", None)


def is_locked_error(exc: BaseException) -> bool:
    """A lock held elsewhere, from SQLAlchemy or straight from the driver."""
    if pg_sqlstate(exc) in PG_CONFLICTS:
        return True
    if isinstance(exc, OperationalError):
        exc = exc.orig if exc.orig is not None else exc
    if isinstance(exc, sqlite3.OperationalError | OperationalError):
        text = str(exc).lower()
        return "database is locked" in text or "database is busy" in text
    return False


def retry_on_lock(fn: Callable[[], T], deadline_s: float, path: str) -> T:
    """Run ``fn``; on a lock error, back off (jittered, capped at 0.5 s) and run it again."""
    try:
        return fn()  # the common case pays nothing for the retry machinery
    except Exception as exc:
        if not is_locked_error(exc):
            raise
    retrying = Retrying(
        retry=retry_if_exception(is_locked_error),
        wait=wait_random_exponential(multiplier=0.005, max=0.5),
        stop=stop_after_delay(deadline_s),
        reraise=False,
    )
    try:
        return retrying(fn)
    except RetryError as exc:
        raise StoreUnavailable(
            f"{path} stayed locked by another process for {deadline_s:.1f}s; "
            "stop the other process or raise lock_timeout",
            path=path,
        ) from exc.last_attempt.exception()
