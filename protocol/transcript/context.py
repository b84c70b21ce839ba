"""What a transcript's model saw, as the pi agent rebuilds it (``buildSessionContext``): the
current branch (the path from the last entry back to the root; abandoned branches are not
part of the conversation) with a compaction's summary in place of what it compacted. And
that conversation as the text lines a new agent is sent when an imported transcript is
resumed (``actors/session/fork_seed.py``), in the same "User: / Assistant:" form a fork's
seed uses."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["content_text", "context_entries", "current_branch", "seed_lines"]


def content_text(content: Any) -> str:
    """A message's content as plain text: a string as it is; blocks' texts joined by newlines,
    an image as ``[image: <mime type>]``."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "image":
            parts.append(f"[image: {block.get('mimeType', 'unknown')}]")
    return "\n".join(parts)


def current_branch(entries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The entries from the root to the last entry, following ``parentId``."""
    if not entries:
        return []
    by_id = {entry.get("id"): entry for entry in entries}
    path: list[Mapping[str, Any]] = []
    seen: set[Any] = set()
    cursor: Mapping[str, Any] | None = entries[-1]
    while cursor is not None and cursor.get("id") not in seen:  # a cycle cannot loop
        seen.add(cursor.get("id"))
        path.append(cursor)
        parent = cursor.get("parentId")
        cursor = by_id.get(parent) if parent is not None else None
    return path[::-1]


def context_entries(entries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The current branch as the model sees it: after the branch's last compaction, that
    compaction (its summary), the entries it kept (from ``firstKeptEntryId``) and those
    after it; without one, the whole branch."""
    path = current_branch(entries)
    last = max((i for i, e in enumerate(path) if e.get("type") == "compaction"), default=None)
    if last is None:
        return path
    compaction = path[last]
    kept_from = next(
        (i for i, e in enumerate(path[:last]) if e.get("id") == compaction.get("firstKeptEntryId")),
        last,
    )
    return [compaction, *path[kept_from:last], *path[last + 1 :]]


def _message_lines(message: Mapping[str, Any]) -> list[str]:
    role = message.get("role")
    content = message.get("content")
    if role == "user":
        return ["User: " + content_text(content).strip()]
    if role == "assistant":
        lines: list[str] = []
        reply: list[str] = []
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, Mapping):
                continue
            if block.get("type") == "text":
                reply.append(str(block.get("text", "")))
            elif block.get("type") == "toolCall":
                if reply:
                    lines.append("Assistant: " + "".join(reply).strip())
                    reply = []
                lines.append(f"(tool call: {block.get('name') or 'tool'})")
        if reply:
            lines.append("Assistant: " + "".join(reply).strip())
        return lines
    if role == "custom":
        return [f"({message.get('customType')}: {content_text(content).strip()})"]
    # Tool results are left out, as a fork's seed leaves them out; pi's own roles
    # (bashExecution, ...) have shapes of pi's.
    return []


def seed_lines(entries: Iterable[Mapping[str, Any]]) -> list[str]:
    """The conversation of ``entries`` (a transcript's, in file order) as seed lines."""
    lines: list[str] = []
    for entry in context_entries(list(entries)):
        kind = entry.get("type")
        if kind == "message" and isinstance(entry.get("message"), Mapping):
            lines.extend(_message_lines(entry["message"]))
        elif kind == "compaction":
            lines.append(f"(summary of the earlier conversation: {entry.get('summary')})")
        elif kind == "branch_summary":
            lines.append(f"(summary of an abandoned branch: {entry.get('summary')})")
        elif kind == "custom_message":
            text = content_text(entry.get("content")).strip()
            lines.append(f"({entry.get('customType')}: {text})")
    return lines
