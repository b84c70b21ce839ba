"""PostgreSQL: what the writer's state guards read, under serializable isolation.

Each write records what it read as SIRead locks, and a B-tree index scan locks whole leaf
pages. In a store with history (many finished commands and closed sessions, analyzed), the
planner finds ``WHERE id = ? AND state = 'running'`` through the index on ``state``, whose
``running`` range holds every node's sessions on one page: any other node's claim or turn
then conflicts with this one (store/hot_sql.py ``row_guard``). These tests run the store's
own statements in such a store and read ``pg_locks``: the guards lock the primary key's
page, never the state index's. The old spelling is run too, so the premise is checked: in
this store it does lock the state index."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from state_machines import CommandEvent, ControlPlaneError, SessionEvent
from store import Store
from store import hot_sql as hot
from store.ops import _shared
from store.raw import PgRaw, RawConnection
from tests.conftest import AGENT

pytestmark = [
    pytest.mark.backend_specific,
    pytest.mark.parametrize("db", ["postgresql"], indirect=True),
]

HISTORY = 3000
STATE_INDEXES = {"ix_commands_state", "ix_sessions_state_updated"}


def _with_history(db: str) -> tuple[str, str]:
    """A store with ``HISTORY`` closed sessions, each with a finished prompt, analyzed; and
    one live idle session with a running command: (its id, the command's id)."""
    with Store.open(db) as st:
        sid = st.spawn(AGENT, "/w").session.id
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO sessions (id, request_hash, depth, agent, cwd, state, queue_mode, "
            "epoch, last_event_seq, last_command_seq, created_at, updated_at, metadata) "
            "SELECT gen_random_uuid()::text, 'h', 0, '{}', '/', 'closed', 'followup', 0, 0, 1, "
            "g, g, '{}' FROM generate_series(1, %s) g",
            (HISTORY,),
        )
        conn.execute(
            "INSERT INTO commands (id, session_id, seq, kind, payload, request_hash, state, "
            "attempts, max_attempts, created_at, updated_at, priority) "
            "SELECT gen_random_uuid()::text, id, 1, 'prompt', '{}', 'h', 'succeeded', 1, 1, "
            "0, 0, 0 FROM sessions WHERE state = 'closed'"
        )
        cid = "live-command"
        conn.execute(
            "INSERT INTO commands (id, session_id, seq, kind, payload, request_hash, state, "
            "attempts, max_attempts, created_at, updated_at, priority) "
            "VALUES (%s, %s, 1, 'prompt', '{}', 'h', 'running', 1, 1, 0, 0, 0)",
            (cid, sid),
        )
        conn.execute("UPDATE sessions SET state = 'idle', epoch = 1 WHERE id = %s", (sid,))
        conn.execute("ANALYZE")
    return sid, cid


@pytest.fixture
def history(db: str) -> Iterator[tuple[str, str, str]]:
    sid, cid = _with_history(db)
    yield db, sid, cid


def _indexes_locked(db: str, write: Callable[[RawConnection], object]) -> set[str]:
    """The indexes whose pages ``write`` took SIRead locks on, in a serializable
    transaction that is rolled back."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
        write(PgRaw(conn))
        rows = conn.execute(
            "SELECT relation::regclass::text FROM pg_locks WHERE mode = 'SIReadLock' "
            "AND locktype = 'page' AND pid = pg_backend_pid()"
        ).fetchall()
        conn.execute("ROLLBACK")
    return {r[0] for r in rows}


def test_a_command_transition_finds_its_row_by_the_primary_key(
    history: tuple[str, str, str],
) -> None:
    db, _, cid = history
    target, allowed = _shared._command_event_guard(CommandEvent.COMPLETE)
    sql = hot.transition_sql(("result", "finished_at"), len(allowed))

    def finish(raw: RawConnection) -> None:
        row = raw.execute(sql, (target.value, time.time(), "{}", time.time(), cid, *allowed))
        assert row.fetchone() is not None  # the guard let it through

    locked = _indexes_locked(db, finish)
    assert "commands_pkey" in locked
    assert not locked & STATE_INDEXES
    # The premise: spelled as a plain ``state IN``, the same update reads the state index.
    plain = sql.replace(hot.row_guard("state"), "state")
    assert plain != sql
    assert "ix_commands_state" in _indexes_locked(
        db, lambda raw: raw.execute(plain, (target.value, time.time(), "{}", 0.0, cid, *allowed))
    )


def test_a_session_transition_finds_its_row_by_the_primary_key(
    history: tuple[str, str, str],
) -> None:
    db, sid, _ = history

    def start_turn(raw: RawConnection) -> None:
        assert _shared.start_turn_with_event(raw, sid, 1) == 2  # spawn's event was seq 1

    locked = _indexes_locked(db, start_turn)
    assert "sessions_pkey" in locked
    assert not locked & STATE_INDEXES
    # The premise, with the statement the store ran, the guard spelled plainly.
    (sql,) = [s for s in _shared._SESSION_TRANSITION_SQL.values() if s.endswith("last_event_seq")]
    plain = sql.replace(hot.row_guard("state"), "state")
    assert plain != sql
    params = ("running", time.time(), sid, "idle", 1)
    assert "ix_sessions_state_updated" in _indexes_locked(
        db, lambda raw: raw.execute(plain, params).fetchone()
    )


def test_a_guard_refuses_what_it_refused_before(history: tuple[str, str, str]) -> None:
    """Not indexable is all ``state || ''`` changes: a stale state is still refused."""
    db, sid, cid = history

    def refused(raw: RawConnection) -> None:
        target, allowed = _shared._command_event_guard(CommandEvent.CLAIM)  # from queued
        sql = hot.transition_sql((), len(allowed))
        assert raw.execute(sql, (target.value, 0.0, cid, *allowed)).fetchone() is None
        with pytest.raises(ControlPlaneError):  # an idle session ends no turn
            _shared._transition(raw, sid, SessionEvent.TURN_ENDED, 1, {}, None)

    _indexes_locked(db, refused)
