"""Keeping ``search_docs`` up to date, in the transaction of the events it indexes: a
prompt's document with its ``prompt`` event, the agent's document of a turn with the event
that ends the turn. Streaming commits pay nothing: the turn's updates are read once, at its
end, from the log this transaction already holds in cache."""

from __future__ import annotations

from state_machines.event_kinds import EventKind
from store.search_text import prompt_text, turn_text
from store.writer import WriteContext

# The events after which the agent's side of a turn is complete (for now: a turn cut off
# and continued later gets a second document for its continuation).
TURN_END_KINDS = frozenset(
    {
        EventKind.TURN_ENDED.value,
        EventKind.TURN_FAILED.value,
        EventKind.TURN_INTERRUPTED.value,
        EventKind.INTERRUPTED.value,
    }
)
INDEXED_KINDS = TURN_END_KINDS | {EventKind.PROMPT.value}

_INSERT_DOC = (
    "INSERT INTO search_docs (session_id, command_id, seq, role, created_at, body) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_TURN_START = (
    "SELECT max(seq) FROM search_docs WHERE session_id = ? AND command_id = ? AND role = 'user'"
)
_TURN_UPDATES = (
    "SELECT payload FROM events WHERE session_id = ? AND seq > ? AND seq < ? "
    "AND command_id = ? AND kind = 'session_update' ORDER BY seq"
)


def add_doc(
    ctx: WriteContext,
    session_id: str,
    command_id: str | None,
    seq: int,
    role: str,
    body: str,
    created_at: float,
) -> None:
    """One searchable document (``role``: ``user`` or ``agent``); empty text is not kept."""
    if body.strip():
        ctx.raw.execute(_INSERT_DOC, (session_id, command_id, seq, role, created_at, body))


def add_docs(ctx: WriteContext, docs: list[tuple[str, str | None, int, str, str, float]]) -> None:
    """Many documents at once (``(session_id, command_id, seq, role, body, created_at)``),
    in one ``executemany``: an import's thousands of messages. Empty ones are left out."""
    rows = [
        (sid, cid, seq, role, at, body) for sid, cid, seq, role, body, at in docs if body.strip()
    ]
    if rows:
        ctx.raw.executemany(_INSERT_DOC, rows)


def index_event(
    ctx: WriteContext,
    session_id: str,
    command_id: str | None,
    kind: str,
    payload_text: str,
    seq: int,
    created_at: float,
) -> None:
    """Called for every event written outside the stream (``INDEXED_KINDS`` only do work)."""
    if kind == EventKind.PROMPT.value:
        add_doc(ctx, session_id, command_id, seq, "user", prompt_text(payload_text), created_at)
    elif kind in TURN_END_KINDS and command_id is not None:
        row = ctx.raw.execute(_TURN_START, (session_id, command_id)).fetchone()
        start = 0 if row is None or row[0] is None else int(row[0])
        frames = ctx.raw.execute(_TURN_UPDATES, (session_id, start, seq, command_id))
        body = turn_text(str(r[0]) for r in frames.fetchall())
        add_doc(ctx, session_id, command_id, seq, "agent", body, created_at)
