"""PostgreSQL notification channels (store/listen.py, store/ops/_shared.py): which write
sends what to which channel, heard on a plain psycopg connection; and a node's listener
LISTENing to a session's channel only while a watch of it is open."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from store import CommandKind, NewEvent, Store, ops
from store.listen import SessionNotifications, session_channel, work_channel
from store.ops._shared import LISTENER_LOCK_CLASS, UNOWNED_CHANNEL, owner_key_sql
from tests.conftest import eventually
from tests.support.spawned import PROMPT, spawned_session

# PostgreSQL's own notifications: stays in the default run.
pytestmark = pytest.mark.backend_specific

OWNER = "elsewhere:4242:1"


def _heard(conn: psycopg.Connection[tuple[object, ...]]) -> set[tuple[str, str]]:
    return {(n.channel, n.payload) for n in conn.notifies(timeout=0.5)}


def _enqueue(store: Store, session_id: str) -> None:
    store.enqueue(session_id, CommandKind.PROMPT, {"content": PROMPT})


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_work_goes_to_the_owner_listening_else_to_every_node_and_streams_to_watchers(
    store: Store, db: str, tmp_path: Path
) -> None:
    session_id, _ = spawned_session(store, tmp_path)
    work, stream = work_channel(OWNER), session_channel(session_id)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"LISTEN {UNOWNED_CHANNEL}; LISTEN {work}; LISTEN {stream}")
        # No owner: every node's channel; a queued command is no stream.
        _enqueue(store, session_id)
        assert _heard(conn) == {(UNOWNED_CHANNEL, session_id)}
        # An owner whose listener is not connected (no lock held): still every node's.
        store.write(lambda ctx: ops.acquire(ctx, session_id, OWNER))
        _enqueue(store, session_id)
        assert _heard(conn) == {(UNOWNED_CHANNEL, session_id)}
        # Its listener connected (holds its lock): the owner's channel only.
        lock = f"SELECT pg_try_advisory_lock({LISTENER_LOCK_CLASS}, {owner_key_sql('%s')})"
        assert conn.execute(lock, (OWNER,)).fetchone() == (True,)
        _enqueue(store, session_id)
        assert _heard(conn) == {(work, session_id)}
        # A commit that appended: the watchers only (the owner wrote it).
        store.append_events(session_id, None, [NewEvent("note", {"n": 1})])
        assert _heard(conn) == {(stream, session_id)}
        # A close: the owner, and the session's watchers (once each: PostgreSQL folds the
        # writer's notification of the ``closed`` event into the same one).
        store.close_session(session_id)
        assert _heard(conn) == {(work, session_id), (stream, session_id)}


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_a_listener_hears_a_session_only_while_it_is_watched(
    store: Store, db: str, tmp_path: Path
) -> None:
    session_id, _ = spawned_session(store, tmp_path)
    streams: list[str] = []
    store_catch_up = store.catch_up

    def catch_up(session_id: str) -> None:
        streams.append(session_id)
        store_catch_up(session_id)

    store.catch_up = catch_up  # type: ignore[method-assign]  # counted, then as always
    listener = SessionNotifications(store, "this:1:1", lambda _: None, lambda: None)
    listener.start()
    other = Store.open(db)  # another node's writer
    try:
        eventually(lambda: listener.holds_lock, 10, "the listener connected")
        other.append_events(session_id, None, [NewEvent("note", {"n": 0})])
        woke = threading.Event()
        watch = store.watch.session(session_id, woke.set)
        eventually(lambda: session_id in listener.listening(), 10, "LISTEN on the session")
        # Once listening, the watchers catch up (a commit may have come before the LISTEN).
        eventually(lambda: streams == [session_id], 10, "the catch-up after LISTEN")
        watch.take()
        woke.clear()
        other.append_events(session_id, None, [NewEvent("note", {"n": 1})])
        assert woke.wait(10), "the other node's commit reached the watch"
        assert [e.payload["n"] for e in watch.take().events] == [1]
        assert listener.counts["session"] == 1
        watch.close()
        eventually(lambda: not listener.listening(), 10, "UNLISTEN once unwatched")
        other.append_events(session_id, None, [NewEvent("note", {"n": 2})])
        _enqueue(other, session_id)  # unowned work: heard on the shared channel
        eventually(lambda: listener.counts["unowned"] == 1, 10, "the unowned work")
        assert listener.counts["session"] == 1  # the stream, unwatched, went to nobody here
    finally:
        other.close()
        listener.stop()
