"""The text a turn produced: the agent's message chunks of one command, in order."""

from __future__ import annotations

import json

from sqlalchemy import Connection, select

from store import Store
from store.schema import events


def turn_text(store: Store, session_id: str, command_id: str) -> str:
    parts: list[str] = []
    for raw in store.read(lambda c: _updates_of(c, session_id, command_id)):
        try:
            update = json.loads(raw)["params"]["update"]
        except (ValueError, KeyError, TypeError):
            continue
        if update.get("sessionUpdate") == "agent_message_chunk":
            content = update.get("content") or {}
            if content.get("type") == "text":
                parts.append(str(content.get("text", "")))
    return "".join(parts)


def _updates_of(conn: Connection, session_id: str, command_id: str) -> list[str]:
    rows = conn.execute(
        select(events.c.payload)
        .where(
            events.c.session_id == session_id,
            events.c.command_id == command_id,
            events.c.kind == "session_update",
        )
        .order_by(events.c.seq)
    )
    return [r[0] for r in rows]
