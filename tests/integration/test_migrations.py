from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, create_engine

from store import Store
from store.location import Backend, locate
from store.migrate import head_revision
from store.schema import metadata
from store.search_ddl import in_schema_module
from tests.conftest import AGENT
from tests.support.direct_sql import execute, is_postgres, query
from tests.support.schema_snapshot import alembic_upgrade
from tests.support.store_contents import stored_bytes

# The PostgreSQL variants stay in the default run: each backend has its own
# migrations.
pytestmark = pytest.mark.backend_specific


def test_migrated_database_matches_the_schema_module(empty_db: str) -> None:
    # By Alembic, revision by revision: Store.open would create a new store from the schema
    # module itself (tests/integration/test_fresh_store.py holds the two to each other).
    alembic_upgrade(empty_db, "head")
    engine = create_engine(locate(empty_db).sqlalchemy_url())
    with engine.connect() as conn:
        # The full-text index objects are each backend's own (store/search_ddl.py).
        context = MigrationContext.configure(conn, opts={"include_name": in_schema_module})
        diff = compare_metadata(context, metadata)
    engine.dispose()
    assert diff == []


def test_open_records_the_head_revision_and_reopen_keeps_data(empty_db: str) -> None:
    with Store.open(empty_db) as store:
        sid = store.spawn(AGENT, "/w", None, None, "k").session.id
    assert query(empty_db, "select version_num from alembic_version") == [(head_revision(),)]
    with Store.open(empty_db) as store:
        assert store.get_session(sid).cwd == "/w"


# SQLite-only: an empty file, what an older release (SQLite only) left behind.
def test_database_from_before_migrations_were_applied_is_upgraded(db_path: Path) -> None:
    # An empty SQLite file (what an older release that crashed before migrating leaves behind)
    sqlite3.connect(db_path).close()
    with Store.open(db_path) as store:
        assert store.list_sessions() == []


def test_store_uses_wal_and_full_sync_by_default(store: Store) -> None:
    if store.backend is Backend.POSTGRESQL:
        # The counterpart: every read one snapshot, every write transaction serializable
        # (what SQLite's one writer at a time gives; store/pg_engine.py).
        def isolation(conn: Connection) -> object:
            return conn.exec_driver_sql("SHOW transaction_isolation").scalar()

        assert store.read(isolation) == "repeatable read"
        assert store.write(lambda ctx: isolation(ctx.conn)) == "serializable"
        return

    def pragmas(conn: object) -> tuple[str, int, int]:
        raw = conn.exec_driver_sql  # type: ignore[attr-defined]
        return (
            raw("PRAGMA journal_mode").scalar(),
            raw("PRAGMA synchronous").scalar(),
            raw("PRAGMA foreign_keys").scalar(),
        )

    assert store.read(pragmas) == ("wal", 2, 1)


# SQLite-only: the first release wrote SQLite files (PostgreSQL stores begin at this one).
def test_database_written_by_the_first_release_opens_under_this_one(db_path: Path) -> None:
    from alembic import command

    from store.migrate import _config

    engine = create_engine(f"sqlite:///{db_path}")
    config = _config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0001")  # the schema as release 0001 wrote it
        conn.exec_driver_sql(
            "INSERT INTO sessions (id, request_hash, depth, agent, cwd, state, queue_mode, epoch,"
            " last_event_seq, last_command_seq, created_at, updated_at, metadata) VALUES"
            " ('s1', 'h', 0, '{\"name\": \"a\", \"command\": [\"a\"]}', '/w', 'idle', 'followup',"
            " 0, 0, 1, 1.0, 1.0, '{}')"
        )
        conn.exec_driver_sql(
            "INSERT INTO commands (id, session_id, seq, kind, payload, request_hash, state,"
            " attempts, max_attempts, created_at, updated_at) VALUES ('c1', 's1', 1, 'prompt',"
            " '{\"content\": []}', 'h', 'queued', 0, 3, 1.0, 1.0)"
        )
    engine.dispose()
    with Store.open(db_path) as store:
        assert store.get_session("s1").cwd == "/w"
        claimed = store.claim_next("s1")  # uses the priority column added by 0002
        assert claimed is not None and claimed.id == "c1"
    db = sqlite3.connect(db_path)
    assert db.execute("select version_num from alembic_version").fetchone()[0] == head_revision()
    indexes = {r[1] for r in db.execute("PRAGMA index_list(events)")}
    assert "ix_events_session_command" not in indexes  # added by 0003, dropped by 0004
    db.close()


def test_the_pinned_head_is_alembics_head() -> None:
    """``Store.open`` compares a store's revision with ``HEAD_REVISION`` without loading
    Alembic; a new migration must move the constant too."""
    from store.migrate import HEAD_REVISION

    assert head_revision() == HEAD_REVISION


def test_every_known_revision_is_alembics_and_a_newer_store_is_refused_untouched(
    db: str,
) -> None:
    from alembic.script import ScriptDirectory

    from state_machines import StoreError
    from store.migrate import KNOWN_REVISIONS, SchemaTooNew, _config

    script = ScriptDirectory.from_config(_config())
    assert sorted(rev.revision for rev in script.walk_revisions()) == list(KNOWN_REVISIONS)

    def contents() -> bytes:  # the file's bytes; a database's rows
        return stored_bytes(db) if is_postgres(db) else Path(db).read_bytes()

    Store.open(db).close()
    execute(db, "UPDATE alembic_version SET version_num = '0099'")
    before = contents()
    with pytest.raises(SchemaTooNew, match="revision '0099', newer than this release"):
        Store.open(db)
    assert issubclass(SchemaTooNew, StoreError)
    assert contents() == before  # nothing migrated, nothing written
