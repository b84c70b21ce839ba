"""The text a turn produced: the agent's message chunks of one command, in order.

The session actor takes it from its recorder, which collects it in memory as the frames pass
(``TurnText``); ``turn_text`` rebuilds it from the log for anyone else.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, select

from store import Store
from store.schema import events


def chunk_text(frame: dict[str, Any]) -> str | None:
    """The text of an ``agent_message_chunk`` notification frame, else None."""
    params = frame.get("params")
    update = params.get("update") if isinstance(params, dict) else None
    if not isinstance(update, dict) or update.get("sessionUpdate") != "agent_message_chunk":
        return None
    content = update.get("content") or {}
    if not isinstance(content, dict) or content.get("type") != "text":
        return None
    return str(content.get("text", ""))


class TurnText:
    """The message text of the running turn, collected from its frames."""

    def __init__(self) -> None:
        self._parts: list[str] = []

    def add(self, frame: dict[str, Any]) -> None:
        text = chunk_text(frame)
        if text is not None:
            self._parts.append(text)

    def take(self) -> str:
        text, self._parts = "".join(self._parts), []
        return text


def turn_text(store: Store, session_id: str, command_id: str) -> str:
    parts: list[str] = []
    for raw in store.read(lambda c: _updates_of(c, session_id, command_id)):
        try:
            frame = json.loads(raw)
        except ValueError:
            continue
        text = chunk_text(frame) if isinstance(frame, dict) else None
        if text is not None:
            parts.append(text)
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
