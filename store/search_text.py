"""What of a session's log is searchable, as plain text: the prompt's text blocks, and per
turn the agent's message text and its tool calls' titles. Pure functions over the stored
JSON, shared by the writer (``store/ops/search_index.py``) and the migration that fills the
index from an older log (``store/search_backfill.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

# A document holds at most this much text: a turn that streams megabytes (a file dumped
# into the chat) stays findable by its start without making the index grow with it.
MAX_DOC_CHARS = 64_000


def prompt_text(payload_text: str) -> str:
    """The text a ``prompt`` event sent: its text blocks, and the names of the resources it
    linked or embedded (what a user remembers of a prompt)."""
    payload = _json(payload_text)
    parts: list[str] = []
    for block in payload.get("content") or []:
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif block.get("type") == "resource_link" and isinstance(block.get("uri"), str):
            parts.append(block["uri"])
        elif isinstance(block.get("resource"), dict):
            uri = block["resource"].get("uri")
            if isinstance(uri, str):
                parts.append(uri)
    return _bounded("\n\n".join(parts))


def turn_text(update_frames: Iterable[str]) -> str:
    """The agent's side of a turn from its ``session_update`` frames: message chunks joined
    as streamed, each tool call's title on a line of its own."""
    message: list[str] = []
    titles: list[str] = []
    size = 0
    for frame in update_frames:
        update = _json(frame).get("params", {}).get("update")
        if not isinstance(update, dict):
            continue
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            content = update.get("content")
            if isinstance(content, dict) and isinstance(content.get("text"), str):
                message.append(content["text"])
                size += len(content["text"])
        elif kind in ("tool_call", "tool_call_update") and isinstance(update.get("title"), str):
            title = update["title"]
            if title and title not in titles:
                titles.append(title)
        if size > MAX_DOC_CHARS:
            break
    return _bounded("\n".join(filter(None, ["".join(message), *titles])))


def _bounded(text: str) -> str:
    return text[:MAX_DOC_CHARS]


def _json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
