"""Pure pieces of the transcript mapping: times, usage, and ACP content blocks turned into
the transcript's user text, assistant text and tool results."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

_USAGE_FIELDS = {
    "inputTokens": "input",
    "outputTokens": "output",
    "cachedReadTokens": "cacheRead",
    "cachedWriteTokens": "cacheWrite",
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

JsonObject = dict[str, Any]


def as_utc(moment: datetime) -> datetime:
    # Naive datetimes are taken as UTC: the store writes UTC, some drivers drop the tzinfo.
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def iso_timestamp(moment: datetime) -> str:
    utc = as_utc(moment)
    return f"{utc:%Y-%m-%dT%H:%M:%S}.{utc.microsecond // 1000:03d}Z"


def epoch_ms(moment: datetime) -> int:
    # Integer arithmetic: float timestamps can round 999 ms down to 998.
    return (as_utc(moment) - _EPOCH) // timedelta(milliseconds=1)


def plain(value: Any) -> Any:
    """Deep-copy a payload value into plain JSON containers (dict/list)."""
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def compact_json(value: Any) -> str:
    return json.dumps(plain(value), separators=(",", ":"), ensure_ascii=False)


def zero_usage() -> JsonObject:
    return {
        "input": 0,
        "output": 0,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": 0,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }


def count(value: Any) -> int | float:
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return value if is_number else 0


def map_usage(acp_usage: Any) -> JsonObject:
    """ACP PromptResponse usage -> transcript usage; unknown counts are 0, cost is never known."""
    usage = zero_usage()
    source = mapping(acp_usage)
    for acp_name, name in _USAGE_FIELDS.items():
        usage[name] = count(source.get(acp_name))
    total = source.get("totalTokens")
    if isinstance(total, int | float) and not isinstance(total, bool):
        usage["totalTokens"] = total
    else:
        # pi defines totalTokens as this sum, so it is the right stand-in when ACP omits it.
        usage["totalTokens"] = sum(usage[name] for name in _USAGE_FIELDS.values())
    return usage


# --------------------------------------------------------------------------- content blocks


def placeholder(block: Mapping[str, Any]) -> str:
    """Text standing in for content the transcript cannot carry (audio, binary, unknown)."""
    kind = block.get("type")
    if kind in ("audio", "image"):
        return f"[{kind}: {block.get('mimeType') or 'unknown type'}]"
    if kind == "resource":
        uri = mapping(block.get("resource")).get("uri")
        return f"[binary resource: {uri}]"
    return f"[unsupported content: {kind}]"


def block_text(block: Mapping[str, Any]) -> str | None:
    """The text an ACP ContentBlock carries, or None when it is not textual."""
    kind = block.get("type")
    if kind == "text":
        return string(block.get("text"))
    if kind == "resource":
        return string(mapping(block.get("resource")).get("text"))
    if kind == "resource_link":
        return string(block.get("uri"))
    return None


def user_block(block: Mapping[str, Any]) -> JsonObject:
    """ACP ContentBlock -> transcript text/image block (the only kinds user content allows)."""
    data, mime_type = block.get("data"), block.get("mimeType")
    if block.get("type") == "image" and isinstance(data, str) and isinstance(mime_type, str):
        return {"type": "image", "data": data, "mimeType": mime_type}
    text = block_text(block)
    return {"type": "text", "text": text if text is not None else placeholder(block)}


def prompt_content(blocks: Any) -> str | list[JsonObject]:
    """A prompt is a plain string when it is all text, as pi writes typed-in prompts."""
    items = [mapping(block) for block in blocks] if isinstance(blocks, list) else []
    if all(item.get("type") == "text" for item in items):
        return "\n\n".join(string(item.get("text")) or "" for item in items)
    return [user_block(item) for item in items]


def agent_text(block: Mapping[str, Any]) -> str:
    # Assistant messages hold only text/thinking/toolCall blocks, so anything else is rendered.
    text = block_text(block)
    return text if text is not None else placeholder(block)


def diff_text(item: Mapping[str, Any]) -> str:
    path = string(item.get("path")) or "file"
    old = (string(item.get("oldText")) or "").splitlines()
    new = (string(item.get("newText")) or "").splitlines()
    lines = difflib.unified_diff(old, new, fromfile=path, tofile=path, lineterm="")
    return "\n".join(lines)


def tool_result_block(item: Mapping[str, Any]) -> JsonObject:
    """ACP ToolCallContent -> transcript text/image block."""
    kind = item.get("type")
    if kind == "content":
        return user_block(mapping(item.get("content")))
    if kind == "diff":
        return {"type": "text", "text": diff_text(item)}
    if kind == "terminal":
        # The terminal's output lives in the agent process, not in the event.
        return {"type": "text", "text": f"[terminal {item.get('terminalId')}]"}
    return {"type": "text", "text": f"[unsupported tool content: {kind}]"}


def tool_result_content(content: list[Any], raw_output: Any) -> list[JsonObject]:
    blocks = [tool_result_block(mapping(item)) for item in content]
    if blocks or raw_output is None:
        return blocks
    # Some agents report output only as rawOutput; the model should still see it.
    text = raw_output if isinstance(raw_output, str) else compact_json(raw_output)
    return [{"type": "text", "text": text}]


# --------------------------------------------------------------------------- turn state
