"""Bring a store to the current schema when it is opened.

A store already at head costs one small query. A new, empty database gets the head schema in
one transaction, straight from ``store.schema`` (what the migrations would leave, checked by
tests/integration/test_fresh_store.py), with its version row written here. Only a store
written by an older release is migrated by Alembic, revision by revision: Alembic itself (a
quarter of a second to import, then about a tenth of a second to run the revisions one by
one) is loaded only then."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    bindparam,
    text,
)
from sqlalchemy.exc import OperationalError

from state_machines.errors import StoreError
from store.schema import metadata, store_identity
from store.search_ddl import create_search_index

if TYPE_CHECKING:
    from alembic.config import Config

    from store.location import StoreLocation

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# Every revision this release can migrate from, oldest first; the last one is the head.
# tests/integration/test_migrations.py checks them against Alembic's view of the migrations
# directory, so a new migration cannot be added without listing it here.
KNOWN_REVISIONS = (
    "0001",
    "0002",
    "0003",
    "0004",
    "0005",
    "0006",
    "0007",
    "0008",
    "0009",
    "0010",
    "0011",
    "0012",
    "0013",
    "0014",
)
HEAD_REVISION = KNOWN_REVISIONS[-1]


class SchemaTooNew(StoreError):
    """The store was written by a newer release: this one does not know its schema."""


def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def head_revision() -> str:
    """Alembic's head of the migrations directory (what ``HEAD_REVISION`` must equal)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The store's revision from Alembic's version table (None for a new, empty file)."""
    with engine.connect() as conn:
        return _revision_on(conn)


def _revision_on(conn: Connection) -> str | None:
    # PostgreSQL: a failed statement would abort the migration's transaction; ask the catalog.
    if (
        conn.dialect.name == "postgresql"
        and conn.execute(text("SELECT to_regclass('alembic_version')")).scalar() is None
    ):
        return None
    try:
        row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
    except OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    return None if row is None else str(row[0])


def _refuse_newer(current: str | None, path: str | None) -> None:
    if current is not None and current not in KNOWN_REVISIONS:
        raise SchemaTooNew(
            f"cannot open store {path}: its schema is at revision {current!r}, newer than "
            f"this release knows (up to {HEAD_REVISION!r}); open it with the release that "
            "wrote it, or a newer one",
            path=path,
        )


# Any fixed number: the key of the advisory lock every node takes to migrate.
_MIGRATION_LOCK = 0x616370637472  # "acpctr"

# Alembic's version table, as Alembic creates it (alembic.runtime.migration), for a store
# created without Alembic.
_VERSION_TABLE = "alembic_version"
_alembic_version = Table(
    _VERSION_TABLE,
    MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)
# What makes a database not new: any object by one of these names.
_STORE_TABLES = (*metadata.tables, _VERSION_TABLE)
_SQLITE_FOUND = text("SELECT name FROM sqlite_master WHERE name IN :names").bindparams(
    bindparam("names", expanding=True)
)
# Resolved the way the store's own statements resolve them: on the search path.
_POSTGRES_FOUND = text(
    "SELECT name FROM unnest(CAST(:names AS text[])) AS name WHERE to_regclass(name) IS NOT NULL"
)


def upgrade_to_head(
    write_engine: Engine, read_engine: Engine, location: StoreLocation | None = None
) -> None:
    """Check the revision on a reader (no write lock needed when already at head), then
    create or migrate on the writer connection (SQLite) or under an advisory lock
    (PostgreSQL)."""
    current = current_revision(read_engine)
    if current == HEAD_REVISION:
        return
    display = location.display if location is not None else write_engine.url.database
    _refuse_newer(current, display)
    if location is not None and not location.is_file:
        _upgrade_postgres(location)
        return
    with write_engine.connect() as conn:
        if current is None:
            # BEGIN IMMEDIATE: another process may be creating the same file; the one that
            # waited for the lock finds the schema made, as under Alembic.
            with conn.begin():
                if _at_head_without_alembic(conn, display):
                    return
        from alembic import command

        config = _config()
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
    if write_engine.dialect.name == "sqlite":
        # A migration may have rewritten rows that held secrets (0005): the old page images
        # must not stay behind in the WAL. (A store created new held none.)
        raw = write_engine.raw_connection()  # outside any transaction (no BEGIN IMMEDIATE)
        try:
            raw.driver_connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # type: ignore[union-attr]
        finally:
            raw.close()


def _upgrade_postgres(location: StoreLocation) -> None:
    """Several nodes may open a new database at once: each takes the same advisory lock,
    and the one that gets it second finds the schema at head (its READ COMMITTED
    transaction sees the first one's commit) and creates or migrates nothing. PostgreSQL's
    DDL is transactional: a creation or migration that fails leaves no half-made schema."""
    from store.pg_engine import migration_engine

    engine = migration_engine(location.target)
    try:
        with engine.connect() as conn, conn.begin():
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
            if _at_head_without_alembic(conn, location.display):
                return
            from alembic import command

            config = _config()
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
    finally:
        engine.dispose()


def _at_head_without_alembic(conn: Connection, display: str | None) -> bool:
    """In a transaction that holds the lock to migrate: True when the store is at head once
    this returns, because the database held none of the store's tables (nor a version
    table) and the head schema was created here, or because another process got there
    first; False when Alembic must migrate it. A store of a newer release is refused."""
    if not _found_store_tables(conn):
        create_head_schema(conn)
        return True
    current = _revision_on(conn)
    if current == HEAD_REVISION:
        return True
    _refuse_newer(current, display)
    return False


def _found_store_tables(conn: Connection) -> list[str]:
    if conn.dialect.name == "postgresql":
        return list(conn.execute(_POSTGRES_FOUND, {"names": list(_STORE_TABLES)}).scalars())
    return list(conn.execute(_SQLITE_FOUND, {"names": _STORE_TABLES}).scalars())


def create_head_schema(conn: Connection) -> None:
    """The schema, version and seed rows that ``alembic upgrade head`` leaves in an empty
    database, in the caller's transaction: the tables and indexes of ``store.schema``,
    Alembic's version table at ``HEAD_REVISION`` and the store's identity (0007)."""
    metadata.create_all(conn, checkfirst=False)
    create_search_index(conn)
    _alembic_version.create(conn, checkfirst=False)
    conn.execute(_alembic_version.insert().values(version_num=HEAD_REVISION))
    conn.execute(store_identity.insert().values(id=uuid.uuid4().hex, created_at=time.time()))
