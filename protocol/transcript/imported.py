"""Entries of an imported transcript (``transcript_entry`` events) in an export: written back
as they were read, with their own ids and parents (``protocol/transcript/mapping.py``
continues after them), under the imported header (``docs/store.md``, "Import")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from protocol.transcript.content import JsonObject, compact_json, mapping, plain
from protocol.transcript.inputs import EventLike
from protocol.transcript.reader import VerbatimEntry
from state_machines.event_kinds import EventKind


def reserved_ids(events: Iterable[EventLike]) -> tuple[set[str], set[str]]:
    """The entry ids and the tool call ids the imported entries use: ids the mapping must
    not give again."""
    entry_ids: set[str] = set()
    call_ids: set[str] = set()
    for event in events:
        if event.kind != EventKind.TRANSCRIPT_ENTRY:
            continue
        entry = mapping(event.payload)
        entry_ids.add(str(entry.get("id")))
        message = mapping(entry.get("message"))
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, list):
            call_ids.update(
                str(mapping(block).get("id"))
                for block in content
                if mapping(block).get("type") == "toolCall"
            )
    return entry_ids, call_ids


def verbatim(event: EventLike, payload: Mapping[str, Any]) -> VerbatimEntry:
    """An imported entry as the line it was read from: the store's records carry the
    payload's text (``raw``); an event without it, or whose text is not one line, is
    written as compact JSON."""
    raw = getattr(event, "raw", None)
    entry = plain(payload)
    if not isinstance(raw, str) or "\n" in raw or "\r" in raw:
        raw = compact_json(entry)
    return VerbatimEntry(entry, raw)


def header_as(header: Mapping[str, Any], session_id: str, version: int) -> JsonObject:
    """The file's own header (field order kept), as this session, in this version."""
    out = dict(header)
    out["id"] = session_id
    out["version"] = version
    return out
