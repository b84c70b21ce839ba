"""Mapping stored control-plane events to a JSONL transcript (format v3).

The control plane records every ACP ``session/update`` and its own lifecycle events; this module
replays them into the pi/OpenClaw session format (``transcript-v3.md``) so that an exported
session loads in those tools unchanged. :func:`transcript_entries` is pure: the same session and
events always give the same entries, ids included, which is what lets golden files pin the
output byte for byte. :func:`write_transcript` is the only I/O.

The mapping is a small state machine over one *turn* at a time (a prompt until its end):
streamed chunks and tool calls accumulate in an open assistant message, which is flushed when a
tool result has to follow it or when the turn ends. A v3 consumer expects every ``toolCall``
block to be answered by exactly one ``toolResult``, so tool calls left open by a crash, a cancel
or the end of the recorded events get a synthesized error result.

Entries of an imported transcript (``transcript_entry`` events) are written back as they were
read, with their own ids and parents; entries mapped after them continue from the last one.
An imported session's export is its imported header and entries alone (``docs/store.md``,
"Import").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from protocol.atomic_file import write_text_atomically
from protocol.transcript import imported
from protocol.transcript.content import (
    JsonObject,
    agent_text,
    epoch_ms,
    iso_timestamp,
    mapping,
    plain,
    prompt_content,
    string,
    tool_result_content,
    zero_usage,
)
from protocol.transcript.inputs import EventLike, TranscriptSession, entry_id
from protocol.transcript.reader import dump_lines
from protocol.transcript.turn import ToolCall, Turn, TurnClose
from state_machines.event_kinds import EventKind

__all__ = [
    "CONTROL_PLANE_CUSTOM_TYPE",
    "SUBAGENT_CUSTOM_TYPE",
    "EventLike",
    "TranscriptSession",
    "entry_id",
    "transcript_entries",
    "write_transcript",
]

TRANSCRIPT_VERSION = 3
CONTROL_PLANE_CUSTOM_TYPE = "acp-control-plane"
SUBAGENT_CUSTOM_TYPE = "subagent-announce"
FALLBACK_AGENT_NAME = "acp-agent"

_FINAL_TOOL_STATUSES = frozenset({"completed", "failed"})


# --------------------------------------------------------------------------- the mapping


class _TranscriptBuilder:
    """Consumes events in seq order and accumulates entries; ``finish`` returns the lines."""

    def __init__(self, session: TranscriptSession) -> None:
        self._session = session
        self._agent = session.agent_name or FALLBACK_AGENT_NAME
        self._entries: list[JsonObject] = []
        self._taken_ids: set[str] = set()
        self._model_id: str | None = None
        self._turn: Turn | None = None
        self._used_call_ids: set[str] = set()
        # Where the entries being produced come from: seed for ids, time for timestamps.
        self._seed_prefix = f"{session.id}:start"
        self._index = 0
        self._moment = session.created_at
        self._handlers: dict[str, Callable[[Mapping[str, Any]], None]] = {
            EventKind.PROMPT: self._on_prompt,
            EventKind.SESSION_UPDATE: self._on_session_update,
            EventKind.TURN_ENDED: self._on_turn_ended,
            EventKind.TURN_FAILED: self._on_turn_failed,
            EventKind.INTERRUPTED: self._on_interrupted,
            EventKind.ANNOUNCE: self._on_announce,
            EventKind.PERMISSION_REQUESTED: self._on_permission_requested,
        }

    # ---- driving

    def reserve(self, events: Iterable[EventLike]) -> None:
        """Keep the entry ids and tool call ids of imported entries from those this mapping
        makes, wherever in the log those entries are (a resumed session's agent may number
        its tool calls as the imported conversation's agent did)."""
        entry_ids, call_ids = imported.reserved_ids(events)
        self._taken_ids |= entry_ids
        self._used_call_ids |= call_ids

    def feed(self, event: EventLike) -> None:
        self._seed_prefix = f"{self._session.id}:{event.seq}"
        self._index = 0
        self._moment = event.created_at
        payload = mapping(event.payload)
        if event.kind == EventKind.TRANSCRIPT_ENTRY:
            self._entries.append(imported.verbatim(event, payload))
            return
        if self._session.imported_header is not None:
            return  # an imported session's creation and close are not the transcript's
        handler = self._handlers.get(event.kind)
        if handler is None:
            self._emit_lifecycle(event.kind, payload)
        else:
            handler(payload)

    def finish(self) -> list[JsonObject]:
        # Entries produced after the last event keep its timestamp but get their own seeds.
        self._seed_prefix = f"{self._session.id}:end"
        self._index = 0
        self._close_turn(
            TurnClose.cut_off(
                "session ended before the turn finished",
                "session ended before the tool call finished",
            )
        )
        return [self._header(), *self._entries]

    # ---- emitting

    def _header(self) -> JsonObject:
        if self._session.imported_header is not None:
            return imported.header_as(
                self._session.imported_header, self._session.id, TRANSCRIPT_VERSION
            )
        header: JsonObject = {
            "type": "session",
            "version": TRANSCRIPT_VERSION,
            "id": self._session.id,
            "timestamp": iso_timestamp(self._session.created_at),
            "cwd": self._session.cwd,
        }
        if self._session.parent_session is not None:
            header["parentSession"] = self._session.parent_session
        return header

    def _emit(self, entry_type: str, fields: JsonObject) -> None:
        new_id = entry_id(f"{self._seed_prefix}:{self._index}", self._taken_ids)
        self._index += 1
        self._taken_ids.add(new_id)
        parent = self._entries[-1]["id"] if self._entries else None
        entry: JsonObject = {
            "type": entry_type,
            "id": new_id,
            "parentId": parent,
            "timestamp": iso_timestamp(self._moment),
        }
        entry.update(fields)
        self._entries.append(entry)

    def _emit_message(self, message: JsonObject) -> None:
        message["timestamp"] = epoch_ms(self._moment)
        self._emit("message", {"message": message})

    def _emit_custom(self, custom_type: str, data: Any) -> None:
        self._emit("custom", {"customType": custom_type, "data": data})

    def _emit_lifecycle(self, kind: str, payload: Mapping[str, Any]) -> None:
        data = {"event": kind}
        # "event" names the kind even if a payload happens to carry a key of that name.
        data.update({key: plain(value) for key, value in payload.items() if key != "event"})
        self._emit_custom(CONTROL_PLANE_CUSTOM_TYPE, data)

    def _on_permission_requested(self, payload: Mapping[str, Any]) -> None:
        # The lifecycle entry names the request; the tool call and options it carries (for
        # other nodes' clients) are in the transcript already as the tool call's own entry.
        named = {k: payload[k] for k in ("requestId", "toolCallId", "title") if k in payload}
        self._emit_lifecycle(EventKind.PERMISSION_REQUESTED, named)

    def _emit_assistant(
        self, blocks: list[JsonObject], stop_reason: str, usage: JsonObject, error: str | None
    ) -> None:
        message: JsonObject = {
            "role": "assistant",
            "content": blocks,
            "api": self._agent,
            "provider": self._agent,
            "model": self._model_id or self._agent,
            "usage": usage,
            "stopReason": stop_reason,
        }
        if error is not None:
            message["errorMessage"] = error
        self._emit_message(message)

    def _emit_tool_result(self, tool: ToolCall, content: list[JsonObject], is_error: bool) -> None:
        tool.final = True
        self._emit_message(
            {
                "role": "toolResult",
                "toolCallId": tool.call_id,
                "toolName": tool.block["name"],
                "content": content,
                "isError": is_error,
            }
        )

    # ---- turns

    def _ensure_turn(self) -> Turn:
        if self._turn is None:
            self._turn = Turn(implicit=True)
        return self._turn

    def _flush_blocks(self, stop_reason: str, usage: JsonObject, error: str | None) -> None:
        """Emit the open assistant message; an empty one only to record an error/abort."""
        turn = self._ensure_turn()
        if turn.blocks or stop_reason in ("error", "aborted"):
            self._emit_assistant(turn.blocks, stop_reason, usage, error)
        for tool in turn.tools.values():
            tool.flushed = True
        turn.blocks = []

    def _close_turn(self, close: TurnClose) -> None:
        if self._turn is None:
            return
        self._flush_blocks(close.stop_reason, close.usage, close.error_message)
        for tool in self._turn.tools.values():
            if not tool.final:
                self._emit_tool_result(tool, [{"type": "text", "text": close.tool_reason}], True)
        self._turn = None

    # ---- lifecycle events

    def _on_prompt(self, payload: Mapping[str, Any]) -> None:
        if self._turn is not None and self._turn.implicit:
            # Agent output outside a prompt (e.g. replayed history) is complete as it stands.
            self._close_turn(
                TurnClose("stop", "a new prompt started before the tool call finished")
            )
        else:
            self._close_turn(
                TurnClose.cut_off(
                    "a new prompt started before the turn ended",
                    "a new prompt started before the tool call finished",
                )
            )
        self._turn = Turn(implicit=False)
        if payload.get("continuation"):
            # Sent in place of a prompt a crash or Ctrl-C cut off (store/ops/interrupted.py):
            # said before the message, which is what the agent was sent.
            self._emit_lifecycle(
                "continuation", {k: v for k, v in payload.items() if k != "content"}
            )
        content = prompt_content(payload.get("content"))
        self._emit_message({"role": "user", "content": content})

    def _on_turn_ended(self, payload: Mapping[str, Any]) -> None:
        self._close_turn(TurnClose.ended(payload))

    def _on_turn_failed(self, payload: Mapping[str, Any]) -> None:
        self._close_turn(TurnClose.failed(string(payload.get("error")) or "the turn failed"))

    def _on_interrupted(self, payload: Mapping[str, Any]) -> None:
        reason = string(payload.get("reason")) or "interrupted"
        tool_reason = f"the turn was interrupted before the tool call finished: {reason}"
        self._close_turn(TurnClose.cut_off(reason, tool_reason))
        self._emit_lifecycle(EventKind.INTERRUPTED, payload)

    def _on_announce(self, payload: Mapping[str, Any]) -> None:
        child = payload.get("childSessionId")
        summary = f"[subagent {child} done] status={payload.get('status')}"
        text = string(payload.get("text"))
        self._emit(
            "custom_message",
            {
                "customType": SUBAGENT_CUSTOM_TYPE,
                "content": f"{summary}\n{text}" if text else summary,
                "display": True,
                "details": plain(payload),
            },
        )

    # ---- ACP session/update

    def _on_session_update(self, payload: Mapping[str, Any]) -> None:
        # The log keeps the whole JSON-RPC frame verbatim; the update is in its params.
        if payload.get("method") == "session/update":
            payload = mapping(payload.get("params"))
        update = payload.get("update")
        kind = mapping(update).get("sessionUpdate")
        if not isinstance(update, Mapping) or not isinstance(kind, str):
            self._emit_lifecycle(
                EventKind.SESSION_UPDATE, payload
            )  # malformed: keep it, don't guess
            return
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            block_type = "text" if kind == "agent_message_chunk" else "thinking"
            text = agent_text(mapping(update.get("content")))
            self._ensure_turn().append_text(block_type, text)
        elif kind in ("tool_call", "tool_call_update"):
            self._on_tool_update(update, announced=kind == "tool_call")
        elif kind == "session_info_update" and "title" in update:
            self._emit("session_info", self._session_info_fields(update))
        else:
            self._emit_custom(kind, plain(update))
            if kind == "config_option_update":
                self._track_model(update)

    @staticmethod
    def _session_info_fields(update: Mapping[str, Any]) -> JsonObject:
        # A null title clears the name; a session_info entry without "name" does that in v3.
        title = string(update.get("title"))
        return {"name": title} if title is not None else {}

    def _track_model(self, update: Mapping[str, Any]) -> None:
        options = update.get("configOptions")
        for option in options if isinstance(options, list) else []:
            option = mapping(option)
            value = string(option.get("currentValue"))
            if option.get("category") != "model" or not value or value == self._model_id:
                continue
            self._model_id = value
            self._emit("model_change", {"provider": self._agent, "modelId": value})

    # ---- tool calls

    def _fresh_call_id(self, call_id: str) -> str:
        # Agents should not reuse ids, but a reused one would leave two results after the first
        # toolCall block, which v3 readers reject; the copy gets a distinct id instead.
        suffix = 2
        while f"{call_id}~{suffix}" in self._used_call_ids:
            suffix += 1
        return f"{call_id}~{suffix}"

    def _tool_for(self, update: Mapping[str, Any], announced: bool) -> ToolCall | None:
        """The open tool call an update applies to, creating it if needed; None to ignore."""
        turn = self._ensure_turn()
        call_id = string(update.get("toolCallId")) or f"call-{self._seed_prefix}"
        existing = turn.tools.get(call_id)  # by the agent's id: its updates use that one
        if existing is not None:
            return None if existing.final else existing
        block_id = call_id
        if call_id in self._used_call_ids:
            if not announced:
                return None  # a late update for a call whose result is already written
            block_id = self._fresh_call_id(call_id)
        tool = ToolCall(block={"type": "toolCall", "id": block_id, "name": "tool", "arguments": {}})
        self._used_call_ids.add(block_id)
        turn.tools[call_id] = tool
        turn.blocks.append(tool.block)
        return tool

    def _on_tool_update(self, update: Mapping[str, Any], announced: bool) -> None:
        tool = self._tool_for(update, announced)
        if tool is None:
            return
        tool.apply(update)
        if update.get("status") not in _FINAL_TOOL_STATUSES:
            return
        if self._ensure_turn().blocks:
            # The toolCall block must be in an emitted message before its result.
            self._flush_blocks("toolUse", zero_usage(), None)
        content = tool_result_content(tool.content, tool.raw_output)
        self._emit_tool_result(tool, content, tool.failed)


def transcript_entries(
    session: TranscriptSession, events: Iterable[EventLike]
) -> list[dict[str, Any]]:
    """Map a session's stored events (any order; sorted by seq) to transcript lines.

    The first item is the header; the rest are entries forming one chain (imported entries
    keep the tree they had).
    """
    builder = _TranscriptBuilder(session)
    ordered = sorted(events, key=lambda event: event.seq)
    builder.reserve(ordered)
    for event in ordered:
        builder.feed(event)
    return builder.finish()


def write_transcript(
    path: str | os.PathLike[str], session: TranscriptSession, events: Iterable[EventLike]
) -> int:
    """Write the transcript atomically (temp file + rename); return the number of lines."""
    lines = transcript_entries(session, events)
    write_text_atomically(path, dump_lines(lines))
    return len(lines)
