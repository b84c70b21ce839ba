"""One turn as the mapping builds it: its open assistant blocks and tool calls, and how it
closes (stop reason, usage, error)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.transcript.content import (
    JsonObject,
    map_usage,
    plain,
    string,
    zero_usage,
)

# ACP StopReason -> transcript stopReason (spec table).
_STOP_REASONS = {
    "end_turn": "stop",
    "max_tokens": "length",
    "max_turn_requests": "length",
    "refusal": "error",
    "cancelled": "aborted",
}
# Error/aborted assistant messages carry an errorMessage; these explain ACP's own reasons.
_STOP_REASON_ERRORS = {
    "refusal": "the agent refused to continue",
    "cancelled": "the turn was cancelled",
}


@dataclass
class ToolCall:
    """A tool call of the open turn; ``block`` is its toolCall block in an assistant message."""

    block: JsonObject
    title: str | None = None
    kind: str | None = None
    content: list[Any] = field(default_factory=list)
    raw_output: Any = None
    failed: bool = False
    final: bool = False  # a toolResult has been emitted
    flushed: bool = False  # its block is in an emitted message and must not change

    @property
    def call_id(self) -> str:
        return str(self.block["id"])

    def apply(self, update: Mapping[str, Any]) -> None:
        """Fold a tool_call / tool_call_update into this call (ACP updates replace fields)."""
        self.title = string(update.get("title")) or self.title
        self.kind = string(update.get("kind")) or self.kind
        if isinstance(update.get("content"), list):
            self.content = list(update["content"])
        if "rawOutput" in update:
            self.raw_output = update["rawOutput"]
        self.failed = update.get("status") == "failed" or self.failed
        if not self.flushed:
            self.block["name"] = self.title or self.kind or "tool"
            if "rawInput" in update:
                raw_input = update["rawInput"]
                is_object = isinstance(raw_input, Mapping)
                self.block["arguments"] = plain(raw_input) if is_object else {}


@dataclass
class Turn:
    """One prompt turn (or agent output that arrived outside any prompt: ``implicit``)."""

    implicit: bool
    blocks: list[JsonObject] = field(default_factory=list)
    tools: dict[str, ToolCall] = field(default_factory=dict)

    def append_text(self, kind: str, text: str) -> None:
        """Add streamed text, merging into the previous block when it has the same kind."""
        if not text:
            return  # an empty chunk must not create an empty block
        key = "text" if kind == "text" else "thinking"
        if self.blocks and self.blocks[-1]["type"] == kind:
            self.blocks[-1][key] += text
        else:
            self.blocks.append({"type": kind, key: text})


@dataclass(frozen=True)
class TurnClose:
    """How a turn ends: transcript stopReason, usage, errorMessage, reason for open tools."""

    stop_reason: str
    tool_reason: str
    usage: JsonObject = field(default_factory=zero_usage)
    error_message: str | None = None

    @classmethod
    def ended(cls, payload: Mapping[str, Any]) -> TurnClose:
        """A ``turn_ended`` event: the agent's stop reason, mapped, and its usage."""
        acp_reason = string(payload.get("stopReason")) or "end_turn"
        return cls(
            stop_reason=_STOP_REASONS.get(acp_reason, "stop"),
            usage=map_usage(payload.get("usage")),
            error_message=_STOP_REASON_ERRORS.get(acp_reason),
            tool_reason=f"the turn ended ({acp_reason}) before the tool call finished",
        )

    @classmethod
    def failed(cls, error: str) -> TurnClose:
        return cls(
            stop_reason="error",
            error_message=error,
            tool_reason=f"the turn failed before the tool call finished: {error}",
        )

    @classmethod
    def cut_off(cls, reason: str, tool_reason: str) -> TurnClose:
        """Aborted: interrupted, overtaken by a new prompt, or the log ended mid-turn."""
        return cls(stop_reason="aborted", error_message=reason, tool_reason=tool_reason)
