"""The text a turn produced: the agent's message chunks of one command, in order.

The session actor takes it from its recorder, which collects it in memory as the frames pass
(``TurnText``): the outcome never reads the turn back from the log.
"""

from __future__ import annotations

from typing import Any


def chunk_text(frame: dict[str, Any]) -> str | None:
    """The text of an ``agent_message_chunk`` notification frame, else None. Runs for every
    update of every turn: subscripts under one ``try`` instead of a ``get`` and an
    ``isinstance`` per level (a malformed frame is simply not a text chunk)."""
    try:
        update = frame["params"]["update"]
        if update["sessionUpdate"] != "agent_message_chunk":
            return None
        content = update["content"]
        if content["type"] != "text":
            return None
        text = content.get("text", "")
    except (KeyError, TypeError, AttributeError):
        return None
    return text if isinstance(text, str) else str(text)


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
