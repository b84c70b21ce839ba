"""An imported transcript entry as the ACP ``session/update``s a client would have seen, so an
imported session shows in the console, ``acpctl attach`` and an editor's ``session/load``
like one that ran here (``protocol/face/replay.py`` calls this for ``transcript_entry``
events).

Pure, one entry at a time (the replay caches per event): a user message becomes
``user_message_chunk``s, an assistant message ``agent_message_chunk`` / ``agent_thought_chunk``
/ ``tool_call`` (status ``completed``: it is history), a tool result a ``tool_call_update``
with its content. Every other entry (model changes, compactions, custom entries...) is not
conversation a client shows: nothing. Each update says where it came from in
``_meta.acpctl``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["entry_updates"]


def _acp_block(block: Any) -> dict[str, Any] | None:
    """A transcript text/image block as an ACP ContentBlock; None for anything else."""
    if not isinstance(block, Mapping):
        return None
    if block.get("type") == "text":
        return {"type": "text", "text": str(block.get("text", ""))}
    if block.get("type") == "image":
        return {"type": "image", "data": block.get("data"), "mimeType": block.get("mimeType")}
    return None


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks = (_acp_block(block) for block in content if isinstance(content, list))
    return [block for block in blocks if block is not None]


def _assistant(content: Any) -> list[dict[str, Any]]:
    updates: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            text = {"type": "text", "text": str(block.get("text", ""))}
            updates.append({"sessionUpdate": "agent_message_chunk", "content": text})
        elif kind == "thinking":
            thought = {"type": "text", "text": str(block.get("thinking", ""))}
            updates.append({"sessionUpdate": "agent_thought_chunk", "content": thought})
        elif kind == "toolCall":
            updates.append(
                {
                    "sessionUpdate": "tool_call",
                    "toolCallId": str(block.get("id", "")),
                    "title": str(block.get("name") or "tool"),
                    "status": "completed",
                    "rawInput": block.get("arguments", {}),
                }
            )
    return updates


def _tool_result(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = [{"type": "content", "content": b} for b in _blocks(message.get("content"))]
    return [
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": str(message.get("toolCallId", "")),
            "status": "failed" if message.get("isError") else "completed",
            "content": content,
        }
    ]


def entry_updates(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ACP updates one transcript entry shows (possibly none)."""
    message = entry.get("message") if entry.get("type") == "message" else None
    if not isinstance(message, Mapping):
        return []
    role = message.get("role")
    if role == "user":
        updates = [
            {"sessionUpdate": "user_message_chunk", "content": block}
            for block in _blocks(message.get("content"))
        ]
    elif role == "assistant":
        updates = _assistant(message.get("content"))
    elif role == "toolResult":
        updates = _tool_result(message)
    else:
        return []
    meta = {"acpctl": {"imported": True, "entryId": entry.get("id")}}
    return [{**update, "_meta": meta} for update in updates]
