"""The webhook checkpoint in the store (either backend): one deliverer per hook store-wide,
taken over only from a dead owner, moved only by its owner; and what is pending for it."""

from __future__ import annotations

import socket

from state_machines.event_kinds import EventKind
from store import AgentSpec, NewEvent, Store
from store.ops import notify as ops
from store.ownership import _owner_of as owner_of
from store.ownership import this_owner
from store.queries import notify as queries

DEAD = f"{socket.gethostname()}:999999999:1"  # no such pid: a process that is gone
ALIVE_ELSEWHERE = owner_of(1)  # init: alive, and not this process


def _session(store: Store, *kinds: str) -> str:
    sid = store.spawn(AgentSpec("a", ("true",)), "/tmp").session.id
    store.append_events(sid, None, [NewEvent(kind, {"n": i}) for i, kind in enumerate(kinds)])
    return sid


def test_a_new_hook_starts_at_the_end_and_only_its_owner_moves_it(store: Store) -> None:
    _session(store, EventKind.TURN_ENDED)
    end = store.read(queries.last_event_id)
    me = this_owner()
    assert store.write(lambda ctx: ops.take_hook(ctx, "h", me)) == end
    assert store.write(lambda ctx: ops.advance_hook(ctx, "h", "someone-else", end + 5)) is False
    assert store.write(lambda ctx: ops.advance_hook(ctx, "h", me, end + 5)) is True
    assert store.write(lambda ctx: ops.advance_hook(ctx, "h", me, end)) is True  # never back
    assert store.read(lambda c: queries.hook_checkpoint(c, "h")) == end + 5


def test_a_live_owner_keeps_the_hook_and_a_dead_or_released_one_gives_it_up(
    store: Store,
) -> None:
    me = this_owner()
    store.write(lambda ctx: ops.take_hook(ctx, "h", ALIVE_ELSEWHERE))
    assert store.read(lambda c: queries.held_elsewhere(c, "h", me)) is True
    assert store.write(lambda ctx: ops.take_hook(ctx, "h", me)) is None
    store.write(lambda ctx: ops.release_hook(ctx, "h", ALIVE_ELSEWHERE))
    assert store.write(lambda ctx: ops.take_hook(ctx, "h", me)) is not None
    store.write(lambda ctx: ops.take_hook(ctx, "g", DEAD))
    assert store.read(lambda c: queries.held_elsewhere(c, "g", me)) is False
    assert store.write(lambda ctx: ops.take_hook(ctx, "g", me)) is not None


def test_pending_reads_the_kinds_asked_for_in_id_order_with_the_session_facts(
    store: Store,
) -> None:
    start = store.read(queries.last_event_id)
    a = _session(store, EventKind.TURN_ENDED, EventKind.SESSION_UPDATE, EventKind.TURN_FAILED)
    kinds = {EventKind.TURN_ENDED, EventKind.TURN_FAILED}
    found, horizon = store.read(lambda c: queries.pending(c, start, kinds, 10, lambda _i: False))
    assert [(f.event.session_id, f.event.kind) for f in found] == [
        (a, EventKind.TURN_ENDED),
        (a, EventKind.TURN_FAILED),
    ]
    assert found[0].agent == "a" and horizon == store.read(queries.last_event_id)
    assert store.read(lambda c: queries.oldest_pending(c, horizon, kinds)) is None


def test_on_postgresql_the_horizon_waits_at_a_gap_until_it_is_settled(store: Store) -> None:
    """PostgreSQL takes an id before its transaction commits: a missing id may still come
    (read up to it only) or never (rolled back: passed once ``gap_settled`` says so). On
    SQLite every id below the newest is committed: no gap holds it back."""
    from sqlalchemy import delete

    from store.dialect_sql import is_postgres
    from store.schema import events

    start = store.read(queries.last_event_id)
    _session(store, EventKind.TURN_ENDED, EventKind.TURN_ENDED, EventKind.TURN_ENDED)
    first, missing, last = start + 2, start + 3, start + 4  # after session_created
    store.write(lambda ctx: ctx.conn.execute(delete(events).where(events.c.id == missing)))
    kinds = {EventKind.TURN_ENDED}
    waiting, held_at = store.read(lambda c: queries.pending(c, start, kinds, 10, lambda _i: False))
    settled, end = store.read(lambda c: queries.pending(c, start, kinds, 10, lambda _i: True))
    assert [f.event.id for f in settled] == [first, last] and end == last
    if store.read(is_postgres):
        assert [f.event.id for f in waiting] == [first] and held_at == first
    else:
        assert (waiting, held_at) == (settled, end)
