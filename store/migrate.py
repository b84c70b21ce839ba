"""Apply Alembic migrations when a store is opened, so a database written by an older release
opens under a newer one. A store already at head costs one small query, not an Alembic run:
Alembic itself (a quarter of a second to import) is loaded only when there is something to
migrate."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from state_machines.errors import StoreError

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


def upgrade_to_head(
    write_engine: Engine, read_engine: Engine, location: StoreLocation | None = None
) -> None:
    """Check the revision on a reader (no write lock needed when already at head), then
    migrate on the writer connection (SQLite) or under an advisory lock (PostgreSQL)."""
    current = current_revision(read_engine)
    if current == HEAD_REVISION:
        return
    display = location.display if location is not None else write_engine.url.database
    _refuse_newer(current, display)
    from alembic import command

    config = _config()
    if location is not None and not location.is_file:
        _upgrade_postgres(location, config)
        return
    with write_engine.connect() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
    if write_engine.dialect.name == "sqlite":
        # A migration may have rewritten rows that held secrets (0005): the old page images
        # must not stay behind in the WAL.
        raw = write_engine.raw_connection()  # outside any transaction (no BEGIN IMMEDIATE)
        try:
            raw.driver_connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # type: ignore[union-attr]
        finally:
            raw.close()


def _upgrade_postgres(location: StoreLocation, config: Config) -> None:
    """Several nodes may open a new database at once: each takes the same advisory lock,
    and the one that gets it second finds the schema at head (its READ COMMITTED
    transaction sees the first one's commit) and migrates nothing. PostgreSQL's DDL is
    transactional: a migration that fails leaves no half-made schema."""
    from alembic import command

    from store.pg_engine import migration_engine

    engine = migration_engine(location.target)
    try:
        with engine.connect() as conn, conn.begin():
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
            current = _revision_on(conn)
            if current == HEAD_REVISION:
                return
            _refuse_newer(current, location.display)
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
    finally:
        engine.dispose()
