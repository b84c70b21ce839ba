"""The text a turn produced: the agent's message chunks of one command, in order.

The session actor takes it from its recorder, which collects it in memory as the frames pass
(``TurnText``): the outcome never reads the turn back from the log.
"""

from __future__ import annotations

from typing import Any


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
