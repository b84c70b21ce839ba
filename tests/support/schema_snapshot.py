"""A store's schema as plain data, read past the store's own code, to compare two databases:
one made by ``Store.open`` on an empty database (store/migrate.py creates the head schema
itself) and one that Alembic migrated from empty, revision by revision."""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from sqlalchemy import create_engine

from store.location import locate
from tests.support.direct_sql import is_postgres, query


def alembic_upgrade(db: str | os.PathLike[str], revision: str) -> None:
    """Migrate ``db`` (a SQLite file or a PostgreSQL URL) to ``revision`` with Alembic, in
    one transaction, the way the store did for every new database before it created the
    head schema itself."""
    from alembic import command

    from store.migrate import _config

    engine = create_engine(locate(db).sqlalchemy_url())
    config = _config()
    try:
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    finally:
        engine.dispose()


def _normalized(sql: str | None) -> str | None:
    return None if sql is None else " ".join(sql.split())


def _sqlite_schema(path: str) -> dict[str, Any]:
    db = sqlite3.connect(path)
    try:

        def rows(sql: str) -> list[tuple[Any, ...]]:
            return [tuple(r) for r in db.execute(sql).fetchall()]

        # The order of sqlite_master's rows is the order things were created in: not
        # part of the schema, so sorted.
        every = rows("SELECT type, name, tbl_name, sql FROM sqlite_master")
        master = sorted((kind, name, table, _normalized(sql)) for kind, name, table, sql in every)
        tables: dict[str, Any] = {}
        for (table,) in rows("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
            # index_list's first field is its position in the list (creation order): left out.
            index_list = sorted(r[1:] for r in rows(f"PRAGMA index_list('{table}')"))
            tables[table] = {
                "columns": rows(f"PRAGMA table_xinfo('{table}')"),
                "indexes": {r[0]: (r, rows(f"PRAGMA index_xinfo('{r[0]}')")) for r in index_list},
                "foreign_keys": rows(f"PRAGMA foreign_key_list('{table}')"),
            }
        pragmas = {
            name: rows(f"PRAGMA {name}")
            for name in ("user_version", "application_id", "auto_vacuum", "encoding", "page_size")
        }
        return {"sqlite_master": master, "tables": tables, "pragmas": pragmas}
    finally:
        db.close()


# Each with the current schema's name in it; every object of every kind, not only tables.
_POSTGRES_QUERIES = {
    "relations": (
        "SELECT c.relname, c.relkind, c.relpersistence FROM pg_class c"
        " WHERE c.relnamespace = current_schema()::regnamespace ORDER BY 1"
    ),
    "columns": (
        "SELECT table_name, ordinal_position, column_name, data_type, is_nullable,"
        " column_default, character_maximum_length, numeric_precision, is_identity,"
        " is_generated, collation_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() ORDER BY 1, 2"
    ),
    "indexes": (
        "SELECT tablename, indexname, indexdef FROM pg_indexes"
        " WHERE schemaname = current_schema() ORDER BY 1, 2"
    ),
    "constraints": (
        "SELECT conrelid::regclass::text, conname, contype, condeferrable, condeferred,"
        " pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE connamespace = current_schema()::regnamespace ORDER BY 1, 2"
    ),
    "sequences": (
        "SELECT sequence_name, data_type, start_value, minimum_value, maximum_value,"
        " increment, cycle_option FROM information_schema.sequences"
        " WHERE sequence_schema = current_schema() ORDER BY 1"
    ),
    "sequence_owners": (
        "SELECT s.relname, t.relname, a.attname FROM pg_depend d"
        " JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'"
        " JOIN pg_class t ON t.oid = d.refobjid"
        " JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid"
        " WHERE s.relnamespace = current_schema()::regnamespace ORDER BY 1"
    ),
    "triggers": (
        "SELECT event_object_table, trigger_name, event_manipulation, action_statement"
        " FROM information_schema.triggers WHERE trigger_schema = current_schema()"
        " ORDER BY 1, 2, 3"
    ),
    "views": (
        "SELECT table_name, view_definition FROM information_schema.views"
        " WHERE table_schema = current_schema() ORDER BY 1"
    ),
    "functions": (
        "SELECT p.proname, pg_get_function_identity_arguments(p.oid) FROM pg_proc p"
        " WHERE p.pronamespace = current_schema()::regnamespace ORDER BY 1, 2"
    ),
}


def schema_snapshot(db: str | os.PathLike[str]) -> dict[str, Any]:
    """Everything about ``db``'s schema that two equal schemas share. SQLite: every
    ``sqlite_master`` row (its SQL with whitespace normalized), each table's
    ``table_xinfo``, ``index_list``, ``index_xinfo`` and ``foreign_key_list``, and the
    file's header pragmas. PostgreSQL: the current schema's relations, columns, indexes,
    constraints, sequences (and what owns them), triggers, views and functions."""
    db = os.fspath(db)
    if not is_postgres(db):
        return _sqlite_schema(db)
    return {name: query(db, sql) for name, sql in _POSTGRES_QUERIES.items()}


def table_rows(db: str | os.PathLike[str], tables: list[str]) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of each of ``tables``, in a fixed order."""
    db = os.fspath(db)
    return {table: sorted(query(db, f"SELECT * FROM {table}"), key=repr) for table in tables}
