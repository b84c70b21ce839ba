from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine

from store import Store
from store.migrate import head_revision
from store.schema import metadata
from tests.conftest import AGENT


def test_migrated_database_matches_the_schema_module(db_path: Path) -> None:
    Store.open(db_path).close()
    engine = create_engine(f"sqlite:///{db_path}")
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    engine.dispose()
    assert diff == []


def test_open_records_the_head_revision_and_reopen_keeps_data(db_path: Path) -> None:
    with Store.open(db_path) as store:
        sid = store.spawn(AGENT, "/w", None, None, "k").session.id
    conn = sqlite3.connect(db_path)
    assert conn.execute("select version_num from alembic_version").fetchone()[0] == head_revision()
    conn.close()
    with Store.open(db_path) as store:
        assert store.get_session(sid).cwd == "/w"


def test_database_from_before_migrations_were_applied_is_upgraded(db_path: Path) -> None:
    # An empty SQLite file (what an older release that crashed before migrating leaves behind)
    sqlite3.connect(db_path).close()
    with Store.open(db_path) as store:
        assert store.list_sessions() == []


def test_store_uses_wal_and_full_sync_by_default(store: Store) -> None:
    def pragmas(conn: object) -> tuple[str, int, int]:
        raw = conn.exec_driver_sql  # type: ignore[attr-defined]
        return (
            raw("PRAGMA journal_mode").scalar(),
            raw("PRAGMA synchronous").scalar(),
            raw("PRAGMA foreign_keys").scalar(),
        )

    assert store.read(pragmas) == ("wal", 2, 1)
