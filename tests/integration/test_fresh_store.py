"""A new, empty database gets the head schema straight from ``store.schema``, in one
transaction and without Alembic (store/migrate.py): these tests hold it to what Alembic's
revisions give an empty database, on each backend, and check the cases that must still go
through Alembic or be refused."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, create_engine

import store.migrate
from state_machines import StoreError
from store import Store
from store.location import locate
from store.migrate import _MIGRATION_LOCK, HEAD_REVISION, head_revision
from store.schema import metadata
from tests.conftest import AGENT, ROOT, eventually
from tests.support.direct_sql import execute, is_postgres, query
from tests.support.postgres import PostgresServer
from tests.support.schema_snapshot import alembic_upgrade, schema_snapshot, table_rows

# The PostgreSQL variants stay in the default run: a new store's schema
# comes from each backend's migrations.
pytestmark = pytest.mark.backend_specific


@pytest.fixture
def alembic_db(empty_db: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of ``empty_db``'s backend, migrated to head by Alembic from
    nothing, revision by revision: what every new store was before."""
    if is_postgres(empty_db):
        server: PostgresServer = request.getfixturevalue("postgres_server")
        reference = server.create_database()
    else:
        reference = str(tmp_path / "alembic.db")
    alembic_upgrade(reference, "head")
    return reference


def _no_alembic_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from alembic import command

    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("Alembic ran a migration")

    monkeypatch.setattr(command, "upgrade", refuse)


def test_a_new_store_has_the_schema_and_rows_alembic_gives_an_empty_database(
    empty_db: str, alembic_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_alembic_run(monkeypatch)
    before = time.time()
    Store.open(empty_db).close()
    after = time.time()

    created, migrated = schema_snapshot(empty_db), schema_snapshot(alembic_db)
    if not is_postgres(empty_db):
        # The one difference: the store's writer makes a new file incrementally vacuumed
        # (store/engine.py) before anything is in it; the reference had no such connection.
        assert created["pragmas"].pop("auto_vacuum") == [(2,)]
        assert migrated["pragmas"].pop("auto_vacuum") == [(0,)]
    assert created.keys() == migrated.keys()
    for part in created:  # one assertion per part: a readable diff when one differs
        assert created[part] == migrated[part], part

    seeded = [name for name in metadata.tables if name != "store_identity"]
    tables = [*seeded, "alembic_version"]
    assert table_rows(empty_db, tables) == table_rows(alembic_db, tables)
    assert query(empty_db, "SELECT version_num FROM alembic_version") == [(HEAD_REVISION,)]
    # The identity is random and stamped with its creation time: each store has one of its own.
    ((created_id, created_at),) = query(empty_db, "SELECT id, created_at FROM store_identity")
    ((migrated_id, _),) = query(alembic_db, "SELECT id, created_at FROM store_identity")
    assert re.fullmatch("[0-9a-f]{32}", created_id) and re.fullmatch("[0-9a-f]{32}", migrated_id)
    assert created_id != migrated_id
    assert before <= created_at <= after


def test_a_new_store_is_created_without_loading_alembic(empty_db: str) -> None:
    script = (
        "import sys\n"
        "from store import Store\n"
        "Store.open(sys.argv[1]).close()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, empty_db],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout.strip() == "[]"
    assert query(empty_db, "SELECT version_num FROM alembic_version") == [(HEAD_REVISION,)]


def test_a_store_created_new_reopens_at_head_with_its_data(
    empty_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store.open(empty_db) as first:
        sid = first.spawn(AGENT, "/w", None, None, "k").session.id
        identity = first.identity

    def refuse(conn: Connection) -> None:
        raise AssertionError("created again")

    monkeypatch.setattr(store.migrate, "create_head_schema", refuse)
    _no_alembic_run(monkeypatch)
    with Store.open(empty_db) as again:
        assert again.get_session(sid).cwd == "/w"
        assert again.identity == identity
    engine = create_engine(locate(empty_db).sqlalchemy_url())
    try:
        with engine.connect() as conn:  # Alembic's own reading of the store's version
            assert MigrationContext.configure(conn).get_current_revision() == head_revision()
        assert store.migrate.current_revision(engine) == HEAD_REVISION
    finally:
        engine.dispose()


def _tables(db: str) -> list[str]:
    if is_postgres(db):
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1"
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1"
    return [name for (name,) in query(db, sql)]


def test_store_tables_without_a_version_table_still_go_to_alembic_and_are_refused(
    empty_db: str,
) -> None:
    """Not a new database: the store's tables are there, Alembic's version row is not.
    Alembic starts from 0001, whose first table exists: the open fails, as it always did,
    and nothing is created or stamped."""
    alembic_upgrade(empty_db, "0001")
    execute(empty_db, "DROP TABLE alembic_version")
    tables = _tables(empty_db)
    with pytest.raises(StoreError, match="already exists"):
        Store.open(empty_db)
    assert _tables(empty_db) == tables
    assert "alembic_version" not in tables and "store_identity" not in tables


def test_a_new_store_is_created_beside_tables_that_are_not_its_own(empty_db: str) -> None:
    execute(empty_db, "CREATE TABLE other_app (x INTEGER)")
    execute(empty_db, "INSERT INTO other_app (x) VALUES (7)")
    with Store.open(empty_db) as opened:
        assert opened.list_sessions() == []
    assert query(empty_db, "SELECT x FROM other_app") == [(7,)]
    assert query(empty_db, "SELECT version_num FROM alembic_version") == [(HEAD_REVISION,)]


@contextmanager
def _migration_lock_held(db: str) -> Iterator[Callable[[], int]]:
    """Hold the lock a store takes to create or migrate ``db``; yields how many
    connections wait for it (``-1``: not observable, SQLite)."""
    if is_postgres(db):
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))

            def waiting() -> int:
                row = conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                    " AND NOT granted AND database = (SELECT oid FROM pg_database"
                    " WHERE datname = current_database())"
                ).fetchone()
                return int(row[0]) if row is not None else 0

            try:
                yield waiting
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))
        return
    # An empty database in WAL mode, its write lock held: the store's writer switches
    # nothing, its reader sees no version table, and its BEGIN IMMEDIATE waits.
    lite = sqlite3.connect(db, isolation_level=None)
    try:
        lite.execute("PRAGMA journal_mode=WAL")
        lite.execute("BEGIN IMMEDIATE")
        yield lambda: -1
        lite.execute("ROLLBACK")
    finally:
        lite.close()


def test_two_opens_of_one_new_database_at_once_create_it_once(
    empty_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both find no version table, then queue for the lock to create (the advisory lock on
    PostgreSQL, the write lock on SQLite): the first creates the schema, the second finds
    it at head and creates nothing."""
    _no_alembic_run(monkeypatch)
    saw_new: set[int] = set()
    created: list[int] = []
    revision, create = store.migrate.current_revision, store.migrate.create_head_schema

    def spying_revision(engine: Any) -> str | None:
        current = revision(engine)
        if current is None:
            saw_new.add(threading.get_ident())
        return current

    def counting_create(conn: Connection) -> None:
        created.append(threading.get_ident())
        create(conn)

    monkeypatch.setattr(store.migrate, "current_revision", spying_revision)
    monkeypatch.setattr(store.migrate, "create_head_schema", counting_create)
    opened: list[Store] = []
    failures: list[BaseException] = []

    def open_store() -> None:
        try:
            opened.append(Store.open(empty_db))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(2)]
    with _migration_lock_held(empty_db) as waiting:
        for thread in threads:
            thread.start()
        eventually(lambda: len(saw_new) == 2, what="both opens see a new database")
        if is_postgres(empty_db):
            eventually(lambda: waiting() == 2, what="both opens wait for the advisory lock")
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert failures == []
        assert len(opened) == 2
        assert len(created) == 1
        assert opened[0].identity == opened[1].identity
        assert query(empty_db, "SELECT count(*) FROM store_identity") == [(1,)]
        assert query(empty_db, "SELECT version_num FROM alembic_version") == [(HEAD_REVISION,)]
    finally:
        for s in opened:
            s.close()
