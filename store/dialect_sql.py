"""The few SQL expressions that differ between SQLite and PostgreSQL, chosen by the
connection's dialect. Everything else in store/ is written once for both."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, Table, func
from sqlalchemy.dialects import sqlite
from sqlalchemy.sql.elements import ColumnElement


def _postgresql() -> Any:
    """SQLAlchemy's PostgreSQL dialect module, imported when a PostgreSQL store uses it
    (~30 ms that a SQLite store's process never needs; the PostgreSQL engine has it loaded
    already)."""
    from sqlalchemy.dialects import postgresql

    return postgresql


def is_postgres(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


def upsert(conn: Connection, table: Table) -> Any:
    """``INSERT`` with ``on_conflict_do_update`` (both dialects have it, in their own
    modules)."""
    if is_postgres(conn):
        return _postgresql().insert(table)
    return sqlite.insert(table)


def greatest(conn: Connection, a: Any, b: Any) -> ColumnElement[Any]:
    """The larger of two values: SQLite's two-argument ``max``; PostgreSQL's ``max`` is an
    aggregate only, its scalar is ``greatest``."""
    return func.greatest(a, b) if is_postgres(conn) else func.max(a, b)


def json_text(conn: Connection, column: Any, key: str) -> ColumnElement[Any]:
    """A top-level field of a TEXT column holding a JSON object, as text."""
    if is_postgres(conn):
        return func.cast(column, _postgresql().JSONB).op("->>")(key)
    return func.json_extract(column, f"$.{key}")


def db_now(conn: Connection) -> float:
    """Now, by the database's clock (unix seconds): node leases are written and judged by
    one clock, so machines whose clocks disagree still agree on whose lease has run out.
    SQLite is on this machine: its clock is this one."""
    if is_postgres(conn):
        value = conn.exec_driver_sql("SELECT EXTRACT(EPOCH FROM clock_timestamp())").scalar_one()
        return float(value)
    return time.time()
