"""Reading a store's tables straight from the database, beside the store's own code: how a
test checks what was really committed (a fresh connection, not the store's pools)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import psycopg


def is_postgres(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


def query(db: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` (``?`` placeholders) on a new connection to ``db`` (a SQLite file or
    a PostgreSQL URL)."""
    if is_postgres(db):
        with psycopg.connect(db, autocommit=True) as conn:
            return [tuple(r) for r in conn.execute(sql.replace("?", "%s"), params).fetchall()]
    lite = sqlite3.connect(db)
    try:
        return [tuple(r) for r in lite.execute(sql, params).fetchall()]
    finally:
        lite.close()


def execute(db: str, sql: str, params: Sequence[Any] = ()) -> int:
    """Run one statement that changes rows, committed; the number of rows changed."""
    if is_postgres(db):
        with psycopg.connect(db, autocommit=True) as conn:
            return conn.execute(sql.replace("?", "%s"), params).rowcount
    lite = sqlite3.connect(db)
    try:
        with lite:
            return lite.execute(sql, params).rowcount
    finally:
        lite.close()


def rows(db: str, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """Like ``query``, each row as a dict by column name."""
    if is_postgres(db):
        with psycopg.connect(db, autocommit=True) as conn:
            cursor = conn.execute(sql.replace("?", "%s"), params)
            names = [c.name for c in cursor.description or ()]
            return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    lite = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    lite.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in lite.execute(sql, params).fetchall()]
    finally:
        lite.close()
