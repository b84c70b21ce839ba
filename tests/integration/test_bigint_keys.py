"""Migration 0014: every key and counter that only grows is 64-bit. A new PostgreSQL store
has ``bigint`` columns and sequence; a store taken back to 0013 (32-bit on PostgreSQL) is
upgraded with its rows kept and then takes event ids, sequence numbers, checkpoints and
token sums past 2^31. On SQLite 0014 changes nothing and ``events.id`` stays the rowid."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine

from store import BindingSpec, NewEvent, SinkKind, Store
from store.location import locate
from store.ops import notify as notify_ops
from tests.conftest import AGENT
from tests.support.direct_sql import execute, is_postgres, query
from tests.support.schema_snapshot import table_rows

pytestmark = pytest.mark.backend_specific

PAST_32_BITS = 2**31 + 10
# Every integer that only grows (the store-wide event id, per-session sequence numbers, what
# holds them, token sums); not the small ones (epoch, attempts, depth, pid, capacity).
_WIDENED = [
    ("sessions", "last_event_seq"),
    ("sessions", "last_command_seq"),
    ("commands", "seq"),
    ("events", "id"),
    ("events", "seq"),
    ("delivery_checkpoints", "last_event_seq"),
    ("session_usage", "input_tokens"),
    ("session_usage", "output_tokens"),
    ("session_usage", "total_tokens"),
    ("notify_checkpoints", "last_event_id"),
    ("search_docs", "seq"),
]


def _pg_types(db: str) -> dict[tuple[str, str], str]:
    rows = query(
        db,
        "SELECT table_name, column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = current_schema()",
    )
    return {(t, c): kind for t, c, kind in rows}


def _sequence_type(db: str) -> str:
    ((kind,),) = query(
        db,
        "SELECT data_type FROM information_schema.sequences WHERE sequence_name ="
        " 'events_id_seq' AND sequence_schema = current_schema()",
    )
    return str(kind)


def _events_table_sql(db: str) -> str:
    ((sql,),) = query(db, "SELECT sql FROM sqlite_master WHERE name = 'events'")
    return " ".join(str(sql).split())


def _downgrade(db: str, revision: str) -> None:
    from alembic import command

    from store.migrate import _config

    engine = create_engine(locate(db).sqlalchemy_url())
    try:
        with engine.begin() as conn:
            config = _config()
            config.attributes["connection"] = conn
            command.downgrade(config, revision)
    finally:
        engine.dispose()


def test_a_new_store_has_64_bit_keys(empty_db: str) -> None:
    Store.open(empty_db).close()
    if is_postgres(empty_db):
        types = _pg_types(empty_db)
        assert {key: types[key] for key in _WIDENED} == dict.fromkeys(_WIDENED, "bigint")
        assert types[("search_docs", "id")] == "bigint"
        assert _sequence_type(empty_db) == "bigint"
    else:
        # INTEGER PRIMARY KEY exactly: the 64-bit rowid (a BIGINT key would not be one).
        assert "id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT" in _events_table_sql(empty_db)


def _fill(store: Store) -> tuple[str, str]:
    sid = store.spawn(AGENT, "/w", None, None, "k").session.id
    binding = store.bind(sid, BindingSpec(SinkKind.JSONL, "/tmp/sink.jsonl"))
    store.append_events(sid, None, [NewEvent("note", {"n": i}) for i in range(3)])
    store.advance_checkpoint(binding.id, 2)
    store.write(lambda ctx: notify_ops.take_hook(ctx, "hook", "me"))
    return sid, binding.id


def test_a_store_from_0013_keeps_its_rows_and_takes_ids_past_2_31(db: str) -> None:
    with Store.open(db) as store:
        sid, binding_id = _fill(store)
    _downgrade(db, "0013")
    assert query(db, "SELECT version_num FROM alembic_version") == [("0013",)]
    if is_postgres(db):  # what 0013 had: 32 bits
        assert set(_pg_types(db)[key] for key in _WIDENED) == {"integer"}
        assert _sequence_type(db) == "integer"
    tables = ["sessions", "commands", "events", "bindings", "delivery_checkpoints"]
    tables += ["notify_checkpoints", "session_usage", "search_docs"]
    before = table_rows(db, tables)

    with Store.open(db) as store:  # upgrades to 0014
        assert table_rows(db, tables) == before
        if is_postgres(db):
            assert set(_pg_types(db)[key] for key in _WIDENED) == {"bigint"}
            assert _sequence_type(db) == "bigint"
            query(db, f"SELECT setval('events_id_seq', {PAST_32_BITS})")
        else:
            assert "id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT" in _events_table_sql(db)
            execute(db, "UPDATE sqlite_sequence SET seq = ? WHERE name = 'events'", [PAST_32_BITS])
        execute(db, "UPDATE sessions SET last_event_seq = ? WHERE id = ?", [PAST_32_BITS, sid])
        appended = store.append_events(sid, None, [NewEvent("note", {"n": i}) for i in range(2)])
        assert [e.id for e in appended] == [PAST_32_BITS + 1, PAST_32_BITS + 2]
        assert [e.seq for e in appended] == [PAST_32_BITS + 1, PAST_32_BITS + 2]
        assert store.events(sid, after_seq=PAST_32_BITS) == appended
        assert store.advance_checkpoint(binding_id, PAST_32_BITS + 2) == PAST_32_BITS + 2
        advanced = store.write(
            lambda ctx: notify_ops.advance_hook(ctx, "hook", "me", PAST_32_BITS + 2)
        )
        assert advanced
        execute(
            db,
            "INSERT INTO session_usage (session_id, input_tokens, output_tokens,"
            " total_tokens, cost_usd, priced_usd, updated_at) VALUES (?, ?, 0, ?, 0, 0, 0)",
            [sid, 3 * 2**31, 3 * 2**31],
        )
    assert query(db, "SELECT last_event_id FROM notify_checkpoints") == [(PAST_32_BITS + 2,)]
    assert query(db, "SELECT total_tokens FROM session_usage") == [(3 * 2**31,)]
    if is_postgres(db):  # and back down, which a value past 32 bits must refuse
        with pytest.raises(Exception, match="out of range"):
            _downgrade(db, "0013")
        assert query(db, "SELECT version_num FROM alembic_version") == [("0014",)]
