"""What an import of a JSONL transcript stores, worked out from the file's bytes before
anything is written (``control_plane/importing.py`` then writes it in one transaction).

The file is read strictly: a line that is not JSON, or not a valid header or entry, is a
``TranscriptFormatError`` naming its line (a tolerant reader skips such lines; an import
that skipped them would lose them without a word). Entry ids must be unique and every
``parentId`` must name an earlier entry, as the exporter relies on. A version 1 file is
upgraded to version 3 on the way (``upgrade.py``), since what the store holds is exported as
version 3.

Each entry is kept as the text of its line (``PlannedEntry.text``): exported again, the line
comes back byte for byte. Only an entry the reading changed (a v2 ``hookMessage`` role, a v1
entry given ids) is stored as its compact JSON."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from protocol.transcript.context import content_text
from protocol.transcript.reader import ParsedLines, check_tree, parse_lines
from protocol.transcript.upgrade import upgrade_v1

__all__ = ["ImportPlan", "PlannedEntry", "SearchText", "plan_import", "search_text"]

UNKNOWN_AGENT = "imported"


@dataclass(frozen=True)
class SearchText:
    """One document for the search index: ``role`` is ``user`` or ``agent``."""

    role: str
    body: str


@dataclass(frozen=True)
class PlannedEntry:
    text: str  # the stored event payload: the entry's JSON text
    line: int  # where it was in the file (1-based)
    created_at: float | None  # its timestamp, epoch seconds (None: not a readable time)
    search: SearchText | None  # what the search index gets of it


@dataclass(frozen=True)
class ImportPlan:
    file_name: str
    sha256: str  # of the file's bytes: an import of the same bytes is the same session
    version: int  # the file's own version (1 to 3)
    header: dict[str, Any]  # as read (its version as the file had it)
    entries: tuple[PlannedEntry, ...]
    agent_name: str  # who wrote the conversation, as far as the file says

    @property
    def header_id(self) -> str:
        return str(self.header.get("id", ""))

    @property
    def cwd(self) -> str:
        return str(self.header.get("cwd") or "")

    def metadata(self, imported_at: str) -> dict[str, Any]:
        """The imported session's ``metadata["imported"]``: where it came from, and the
        header, from which its export's header is rebuilt."""
        return {
            "file": self.file_name,
            "sha256": self.sha256,
            "headerId": self.header_id,
            "version": self.version,
            "importedAt": imported_at,
            "entries": len(self.entries),
            "header": self.header,
        }


def search_text(entry: Mapping[str, Any]) -> SearchText | None:
    """What the search index gets of an entry: a user message's text (``user``), an assistant
    message's text and the names of the tools it called (``agent``); nothing else."""
    message = entry.get("message") if entry.get("type") == "message" else None
    if not isinstance(message, Mapping):
        return None
    content = message.get("content")
    if message.get("role") == "user":
        body = content_text(content)
        return SearchText("user", body) if body.strip() else None
    if message.get("role") != "assistant" or not isinstance(content, list):
        return None
    parts = []
    for block in content:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "toolCall":
            parts.append(str(block.get("name", "")))
    body = "\n".join(part for part in parts if part)
    return SearchText("agent", body) if body.strip() else None


def _epoch_seconds(timestamp: Any) -> float | None:
    if not isinstance(timestamp, str):
        return None
    try:
        moment = datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    # A time without a zone is taken as UTC, as the format's writers mean it.
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _agent_name(entries: list[dict[str, Any]]) -> str:
    """The first assistant message's ``provider`` (this project's exports put the agent's
    name there), else the first model change's, else ``imported``."""
    for entry in entries:
        message = entry.get("message") if entry.get("type") == "message" else None
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            return str(message.get("provider") or UNKNOWN_AGENT)
    for entry in entries:
        if entry.get("type") == "model_change":
            return str(entry.get("provider") or UNKNOWN_AGENT)
    return UNKNOWN_AGENT


def _entry_texts(parsed: ParsedLines, sha256: str) -> tuple[list[dict[str, Any]], list[str]]:
    if parsed.transcript.version == 1:
        entries = upgrade_v1(parsed, sha256)
        return entries, [_compact(entry) for entry in entries]
    check_tree(parsed)
    entries = parsed.transcript.entries
    texts = [
        text if text is not None else _compact(entry)
        for entry, text in zip(entries, parsed.entry_texts, strict=True)
    ]
    return entries, texts


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def plan_import(raw: bytes, file_name: str) -> ImportPlan:
    """The plan for a file's bytes; ``TranscriptFormatError`` (with the line) if the file is
    empty, has no header, has a version the reader does not know, or a bad line."""
    sha256 = hashlib.sha256(raw).hexdigest()
    parsed = parse_lines(raw, strict=True)
    entries, texts = _entry_texts(parsed, sha256)
    planned = tuple(
        PlannedEntry(text, line, _epoch_seconds(entry.get("timestamp")), search_text(entry))
        for entry, text, line in zip(entries, texts, parsed.entry_lines, strict=True)
    )
    return ImportPlan(
        file_name=file_name,
        sha256=sha256,
        version=parsed.transcript.version,
        header=parsed.transcript.header,
        entries=planned,
        agent_name=_agent_name(entries),
    )
