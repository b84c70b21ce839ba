"""The driver connection the hot path's fixed SQL runs on, for either backend.

The hot statements (store/hot_sql.py) are written once, with ``?`` placeholders, and run on
the driver connection inside the transaction SQLAlchemy opened. On SQLite that connection is
``sqlite3.Connection`` itself: no wrapper, nothing added to the path measured there. On
PostgreSQL, ``PgRaw`` gives psycopg 3 the same three calls, with each statement's
placeholders turned into psycopg's ``%s`` once per distinct string (the statements are
fixed, so the cache stays small).

Fewer round trips on PostgreSQL (``later``): a statement whose answer nobody reads (the
writer's ``BEGIN``, its notifications, a savepoint and its release) is not sent on its own
but held, its parameters bound on the client (psycopg's ``ClientCursor.mogrify``), and sent
in one simple-protocol message with the statements held after it, and with the next
statement if that has no parameters (``COMMIT``, ``ROLLBACK TO``): ``RELEASE``, every
notification and ``COMMIT`` are one round trip. (psycopg's pipeline mode would carry a
statement with parameters too, but on this machine its own cost per pipeline was more than
the round trip it saved: docs/scaling.md.) Held statements go out in order before anything
else runs on the connection: ``PgRaw``'s own statements send them first, SQLAlchemy's are
preceded by ``flush_held`` (store/pg_engine.py). Only statements that cannot fail on their
own (transaction control, ``pg_notify`` of a session id) are held, so an error is still
raised by the statement that caused it. ``ACPCTL_PG_BATCH=0`` sends each at once
(bench/nodes.py compares the two).
"""

from __future__ import annotations

import functools
import os
import sqlite3
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from sqlalchemy import Connection


class RawCursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class RawConnection(Protocol):
    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Any: ...

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Any: ...

    @property
    def in_transaction(self) -> bool: ...


@functools.lru_cache(maxsize=1024)
def _pg_sql(sql: str) -> str:
    # No statement of the store holds a literal "?" or "%": the translation is exact.
    return sql.replace("?", "%s")


class _NoRows:
    """psycopg raises on ``fetchone`` after a statement without rows; sqlite3 returns None.
    The store's code is written against sqlite3's answer."""

    __slots__ = ("rowcount",)

    def __init__(self, rowcount: int) -> None:
        self.rowcount = rowcount

    def fetchone(self) -> None:
        return None

    def fetchall(self) -> list[Any]:
        return []


# Whether ``later`` holds statements on PostgreSQL (see the module docstring).
BATCH = os.environ.get("ACPCTL_PG_BATCH", "1") != "0"
# The statements held for each psycopg connection, in order, as SQL text with their values
# in it: shared by every ``PgRaw`` on it (the writer's, and one an operation makes).
_HELD: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()


def flush_held(driver_connection: Any) -> None:
    """Send what is held for this psycopg connection (before a statement of SQLAlchemy's)."""
    held = _HELD.get(driver_connection)
    if held:
        PgRaw(driver_connection).execute_held()


class PgRaw:
    """psycopg 3's connection behind sqlite3's ``execute`` / ``executemany`` /
    ``in_transaction``, and ``later`` (the module docstring)."""

    __slots__ = ("_conn", "_held")

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        held = _HELD.get(conn)
        if held is None:
            held = _HELD[conn] = []
        self._held = held

    def later(self, sql: str, parameters: Sequence[Any] = ()) -> None:
        if not BATCH:
            self._conn.execute(_pg_sql(sql), parameters or None)
        elif parameters:
            from psycopg import ClientCursor

            self._held.append(ClientCursor(self._conn).mogrify(_pg_sql(sql), parameters))
        else:
            self._held.append(sql)

    def execute_held(self) -> None:
        if self._held:
            self._last(self._conn.execute(self._take_held(), None))

    def _take_held(self, *then: str) -> str:
        text = "; ".join([*self._held, *then])
        self._held.clear()  # in place: shared with every PgRaw on this connection
        return text

    @staticmethod
    def _last(cursor: Any) -> Any:
        """The result of the last statement of a message that held several."""
        while cursor.nextset():
            pass
        return cursor

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> Any:
        if not self._held:
            cursor = self._conn.execute(_pg_sql(sql), parameters or None)
        elif parameters:  # what is held goes first, in a message of its own
            self.execute_held()
            cursor = self._conn.execute(_pg_sql(sql), parameters)
        else:  # one message: what is held, then this
            cursor = self._last(self._conn.execute(self._take_held(sql), None))
        if cursor.description is None:
            return _NoRows(cursor.rowcount)
        return cursor

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]]) -> Any:
        self.execute_held()
        cursor = self._conn.cursor()
        cursor.executemany(_pg_sql(sql), list(parameters))
        return _NoRows(cursor.rowcount)

    def executemany_ids(self, sql: str, parameters: Sequence[Sequence[Any]]) -> list[int]:
        """``executemany`` of an ``INSERT ... RETURNING id``: the ids, in order."""
        self.execute_held()
        cursor = self._conn.cursor()
        cursor.executemany(_pg_sql(sql), parameters, returning=True)
        ids: list[int] = []
        while True:
            ids.append(int(cursor.fetchone()[0]))
            if not cursor.nextset():
                return ids

    @property
    def in_transaction(self) -> bool:
        """In a transaction, or about to be (a held ``BEGIN``)."""
        from psycopg.pq import TransactionStatus

        if self._held:
            return True
        return bool(self._conn.info.transaction_status != TransactionStatus.IDLE)


def later(raw: RawConnection, sql: str, parameters: Sequence[Any] = ()) -> None:
    """Run ``sql``, whose answer is not read: on PostgreSQL, with the next statement that
    is (one round trip for both; the module docstring); on SQLite, at once (no round trip
    to save)."""
    if isinstance(raw, PgRaw):
        raw.later(sql, parameters)
    else:
        raw.execute(sql, parameters)


# SQLite: rows per multi-row ``INSERT ... VALUES (...), (...)``, largest first. One statement
# per chunk instead of one execution per row (``executemany`` steps the statement once per
# row, and an AUTOINCREMENT table's counter is written back at the end of each): about half
# the time per row for a recorder's burst of events (docs/benchmarks.md, the nineteenth
# session). Few sizes, so the driver's statement cache holds a handful of texts.
# Fewer than 8 rows (the last few of a burst, a turn's own events) go through
# ``executemany``: there, building the flat parameters costs what the statement saves.
_CHUNKS = (64, 32, 16, 8)


@functools.cache
def _multi_row(plain_sql: str, rows: int) -> str:
    """``plain_sql`` (``INSERT ... VALUES (?, ...)``) with ``rows`` value groups."""
    group = plain_sql[plain_sql.rindex("VALUES ") + len("VALUES ") :]
    return plain_sql + f", {group}" * (rows - 1)


def insert_many(
    raw: RawConnection, returning_sql: str, plain_sql: str, rows: Sequence[Sequence[Any]]
) -> Sequence[int]:
    """Insert ``rows``; the ids the table gave them, in order. On SQLite in a few multi-row
    statements (``_CHUNKS``) and an ``executemany`` for the rest: the one writer's rows take
    consecutive rowids, so the last one says them all (no row is read back); PostgreSQL
    returns them (``RETURNING``)."""
    if isinstance(raw, sqlite3.Connection):
        start, count = 0, len(rows)
        for size in _CHUNKS:
            while count - start >= size:
                chunk = rows[start : start + size]
                raw.execute(_multi_row(plain_sql, size), [v for row in chunk for v in row])
                start += size
        if start < count:
            raw.executemany(plain_sql, rows[start:])
        last = int(raw.execute("SELECT last_insert_rowid()").fetchone()[0])
        return range(last - count + 1, last + 1)
    assert isinstance(raw, PgRaw)
    return raw.executemany_ids(returning_sql, rows)


def raw_of(driver_connection: Any) -> RawConnection:
    if isinstance(driver_connection, sqlite3.Connection):
        return driver_connection
    return PgRaw(driver_connection)


def raw_for(conn: Connection) -> RawConnection:
    """The driver connection under a SQLAlchemy connection, inside its transaction."""
    return raw_of(conn.connection.driver_connection)
