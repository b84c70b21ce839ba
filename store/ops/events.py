"""Event appends and delivery checkpoints."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from state_machines import (
    SessionClosed,
    SessionNotFound,
    SessionState,
)
from state_machines.errors import (
    CheckpointError,
    StaleEpoch,
)
from store import hot_sql as hot
from store.ops import search_index
from store.raw import insert_many
from store.records import (
    EventRecord,
    NewEvent,
)
from store.writer import WriteContext


def insert_events(
    ctx: WriteContext,
    session_id: str,
    command_id: str | None,
    new: Sequence[NewEvent],
    refuse_closed: bool = False,
    epoch: int | None = None,
) -> list[EventRecord]:
    if not new:
        return []
    texts = [e.payload_text() for e in new]  # before the seqs: a payload that fails takes none
    last, state = _next_seqs(ctx, session_id, len(new), epoch)
    if refuse_closed and state == SessionState.CLOSED.value:
        raise SessionClosed(session_id)  # the savepoint undoes the seq bump
    return _write(ctx, session_id, command_id, new, texts, last)


def write_event(
    ctx: WriteContext, session_id: str, command_id: str | None, event: NewEvent, seq: int
) -> EventRecord:
    """Insert ``event`` at ``seq``, which a statement of the caller's took in this
    transaction (a turn's start or end: ``_shared.start_turn_with_event``,
    ``end_turn_with_event``), with what ``append_events`` records for the feeds."""
    (record,) = _write(ctx, session_id, command_id, [event], [event.payload_text()], seq)
    return record


def _write(
    ctx: WriteContext,
    session_id: str,
    command_id: str | None,
    new: Sequence[NewEvent],
    texts: Sequence[str],
    last: int,
) -> list[EventRecord]:
    raw = ctx.raw
    first = last - len(new) + 1
    now = time.time()
    appended: list[EventRecord] = []
    for i, (event, text) in enumerate(zip(new, texts, strict=True)):
        params = (session_id, first + i, command_id, event.kind, text, now)
        (event_id,) = raw.execute(hot.INSERT_EVENT, params).fetchone()
        if event.kind in search_index.INDEXED_KINDS:
            search_index.index_event(ctx, session_id, command_id, event.kind, text, first + i, now)
        appended.append(
            hot.event_record(event_id, session_id, first + i, command_id, event.kind, text, now)
        )
    frames = [(e.kind, e.raw, None) for e in appended]
    ids = [e.id for e in appended]
    ctx.appended.append((session_id, first, command_id, frames, now, ids))
    return appended


def _next_seqs(
    ctx: WriteContext, session_id: str, count: int, epoch: int | None
) -> tuple[int, str]:
    """Reserve ``count`` seqs: the session's last seq after them, and its state. With
    ``epoch`` only for the session's owner at that epoch (``StaleEpoch`` otherwise)."""
    if epoch is None:
        row = ctx.raw.execute(hot.NEXT_EVENT_SEQ, (count, session_id)).fetchone()
    else:
        row = ctx.raw.execute(hot.NEXT_EVENT_SEQ_FENCED, (count, session_id, epoch)).fetchone()
    if row is None:
        if epoch is not None and hot.session_exists(ctx.raw, session_id):
            raise StaleEpoch(session_id, epoch)
        raise SessionNotFound(session_id)
    return int(row[0]), str(row[1])


def append_events(
    ctx: WriteContext,
    session_id: str,
    command_id: str | None,
    new: Sequence[NewEvent],
    epoch: int | None = None,
) -> list[EventRecord]:
    """Append at the next per-session seqs (strictly increasing, no gaps). A closed
    session's log is final (``SessionClosed``). With ``epoch``, fenced: only the session's
    owner at that epoch appends (``StaleEpoch``), checked by the statement that takes the
    seqs."""
    return insert_events(ctx, session_id, command_id, new, refuse_closed=True, epoch=epoch)


def append_frames(
    ctx: WriteContext,
    session_id: str,
    command_id: str | None,
    new: Sequence[tuple[str, str, Any]],
    epoch: int | None = None,
) -> int:
    """The recorder's path: ``(kind, JSON text, parsed)`` frames the caller already parsed
    (the raw tap did; ``parsed`` may be None and is only handed on to the session feeds),
    appended with one ``executemany`` and no records built. Returns the last seq. With
    ``epoch``, fenced as ``append_events``."""
    if not new:
        return 0
    raw = ctx.raw
    last, state = _next_seqs(ctx, session_id, len(new), epoch)
    if state == SessionState.CLOSED.value:
        raise SessionClosed(session_id)
    first = last - len(new) + 1
    now = time.time()
    ids = insert_many(
        raw,
        hot.INSERT_EVENT,
        hot.INSERT_EVENT_NO_RETURN,
        [
            (session_id, first + i, command_id, kind, text, now)
            for i, (kind, text, _) in enumerate(new)
        ],
    )
    ctx.appended.append((session_id, first, command_id, new, now, ids))
    return int(last)


_CHECKPOINT_POSITION = (
    "SELECT cp.last_event_seq, s.last_event_seq FROM delivery_checkpoints cp "
    "JOIN bindings b ON b.id = cp.binding_id JOIN sessions s ON s.id = b.session_id "
    "WHERE cp.binding_id = ?"
)
_CHECKPOINT_MOVE = (
    "UPDATE delivery_checkpoints SET last_event_seq = ?, updated_at = ? WHERE binding_id = ?"
)


def advance_checkpoint(ctx: WriteContext, binding_id: str, seq: int) -> int:
    """Record that the binding's sink accepted every event up to ``seq``: never backwards,
    never past the last committed event."""
    row = ctx.raw.execute(_CHECKPOINT_POSITION, (binding_id,)).fetchone()
    if row is None:
        raise CheckpointError(binding_id, -1, seq, -1)
    current, last = int(row[0]), int(row[1])
    if seq < current or seq > last:
        raise CheckpointError(binding_id, current, seq, last)
    if seq > current:
        ctx.raw.execute(_CHECKPOINT_MOVE, (seq, time.time(), binding_id))
    return seq
