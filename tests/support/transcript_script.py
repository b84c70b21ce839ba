"""Scripts of stored events for the transcript mapping tests, and readers of the result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from protocol.transcript.mapping import (
    TranscriptSession,
    transcript_entries,
)

GOLDEN_DIR = Path(__file__).parent.parent / "golden" / "transcript"
UPDATE_ENV = "TRANSCRIPT_GOLDEN_UPDATE"
T0 = datetime(2026, 3, 15, 10, 0, 0, tzinfo=UTC)
SESSION = TranscriptSession(id="sess-1", cwd="/repo", created_at=T0, agent_name="claude-code")


@dataclass(frozen=True)
class StoredEvent:
    seq: int
    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    created_at: datetime = T0


class EventScript:
    """Builds a seq-numbered event list one second apart, as the store would record it."""

    def __init__(self) -> None:
        self.events: list[StoredEvent] = []

    def add(self, kind: str, payload: Mapping[str, Any] | None = None) -> EventScript:
        seq = len(self.events) + 1
        moment = T0 + timedelta(seconds=seq)
        self.events.append(StoredEvent(seq, kind, payload or {}, moment))
        return self

    def update(self, update_kind: str, /, **fields: Any) -> EventScript:
        return self.add(
            "session_update",
            {"sessionId": "sess-1", "update": {"sessionUpdate": update_kind, **fields}},
        )

    def prompt(self, text: str = "hi") -> EventScript:
        return self.add("prompt", {"commandId": "c", "content": [{"type": "text", "text": text}]})

    def say(self, text: str) -> EventScript:
        return self.update("agent_message_chunk", content={"type": "text", "text": text})

    def think(self, text: str) -> EventScript:
        return self.update("agent_thought_chunk", content={"type": "text", "text": text})

    def tool(self, call_id: str, status: str = "pending", **fields: Any) -> EventScript:
        return self.update("tool_call", toolCallId=call_id, status=status, **fields)

    def tool_update(self, call_id: str, status: str, **fields: Any) -> EventScript:
        return self.update("tool_call_update", toolCallId=call_id, status=status, **fields)

    def end(self, stop_reason: str = "end_turn", usage: Any = None) -> EventScript:
        return self.add("turn_ended", {"commandId": "c", "stopReason": stop_reason, "usage": usage})

    def entries(self, session: TranscriptSession = SESSION) -> list[dict[str, Any]]:
        return transcript_entries(session, self.events)[1:]


def messages(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [entry["message"] for entry in entries if entry["type"] == "message"]


def by_role(entries: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    return [message for message in messages(entries) if message["role"] == role]


def text_result(text: str) -> list[dict[str, Any]]:
    return [{"type": "content", "content": {"type": "text", "text": text}}]
