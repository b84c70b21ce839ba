"""Fill ``search_docs`` from a log written before the index existed (migration 0012): the
documents the writer would have made, event by event, one session at a time so memory stays
at one session's turn."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from state_machines.event_kinds import EventKind
from store.search_text import prompt_text, turn_text

_TURN_END = (
    EventKind.TURN_ENDED.value,
    EventKind.TURN_FAILED.value,
    EventKind.TURN_INTERRUPTED.value,
    EventKind.INTERRUPTED.value,
)
_EVENTS = text(
    "SELECT seq, command_id, kind, payload, created_at FROM events WHERE session_id = :sid "
    "AND kind IN ('prompt', 'session_update', :e1, :e2, :e3, :e4) ORDER BY seq"
)
_INSERT = text(
    "INSERT INTO search_docs (session_id, command_id, seq, role, created_at, body) "
    "VALUES (:sid, :cid, :seq, :role, :at, :body)"
)


def backfill_search_docs(conn: Connection) -> int:
    """Index every session's prompts and ended turns; returns the documents written."""
    written = 0
    session_ids = list(conn.execute(text("SELECT id FROM sessions ORDER BY id")).scalars())
    ends = dict(zip(("e1", "e2", "e3", "e4"), _TURN_END, strict=True))
    for sid in session_ids:
        docs: list[dict[str, Any]] = []
        frames: dict[str, list[str]] = {}  # command id -> its turn's updates so far
        for seq, cid, kind, payload, at in conn.execute(_EVENTS, {"sid": sid, **ends}):
            if kind == EventKind.PROMPT.value:
                frames[cid] = []
                docs.append(_doc(sid, cid, seq, "user", prompt_text(payload), at))
            elif kind == EventKind.SESSION_UPDATE.value:
                if cid in frames:
                    frames[cid].append(payload)
            elif cid is not None:
                docs.append(_doc(sid, cid, seq, "agent", turn_text(frames.pop(cid, [])), at))
        docs = [d for d in docs if d["body"].strip()]
        if docs:
            conn.execute(_INSERT, docs)
            written += len(docs)
    return written


def _doc(sid: str, cid: str | None, seq: int, role: str, body: str, at: float) -> dict[str, Any]:
    return {"sid": sid, "cid": cid, "seq": seq, "role": role, "at": at, "body": body}
