"""Reading and validating JSONL session transcripts (format versions 1 to 3).

The format is the pi coding agent's session file (see ``transcript-v3.md``). Readers must
accept what older writers produced, so :func:`read_transcript` takes version 1, 2 and 3 files
(a missing version means 1), skips lines that are not JSON, and normalizes the one v2 → v3
rename that changes meaning (message role ``hookMessage`` became ``custom``). With ``strict``
(an import into the store, which must not lose a line silently) a line that is not JSON is an
error instead. Everything else
is kept as written, field order included, so that :func:`dump_transcript` reproduces a
compact-JSON file byte for byte.

Entries are checked per type with pydantic models run in strict mode: required fields must be
present with the right JSON type; unknown extra fields are allowed because extensions add them.
:func:`validate_v3` adds the structural checks an export from this project must pass.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from protocol.transcript.schema import (
    ENTRY_MODELS,
    MESSAGE_MODELS,
    CompactionEntry,
    CompactionEntryV1,
    Header,
    HeaderV1,
    LinearFields,
    OtherMessage,
    TreeFields,
)
from state_machines import ControlPlaneError

__all__ = [
    "SUPPORTED_VERSIONS",
    "ParsedLines",
    "Transcript",
    "TranscriptFormatError",
    "VerbatimEntry",
    "check_entry",
    "check_tree",
    "dump_lines",
    "dump_transcript",
    "parse_lines",
    "read_transcript",
    "validate_v3",
]

SUPPORTED_VERSIONS = (1, 2, 3)
CURRENT_VERSION = 3


class TranscriptFormatError(ControlPlaneError, ValueError):
    """A transcript line that is JSON but not a valid header or entry.

    ``line`` is the 1-based physical line number in the file.
    """

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


@dataclass
class Transcript:
    """A parsed transcript: the header object and the entries, as plain JSON dicts."""

    header: dict[str, Any]
    entries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def version(self) -> int:
        """The header's format version; a header without one is version 1."""
        version = self.header.get("version", 1)
        return version if isinstance(version, int) else 1


# --------------------------------------------------------------------------- parsing


class VerbatimEntry(dict[str, Any]):
    """An entry whose line is written back exactly as it was read (``text``): an imported
    entry, re-exported byte for byte whatever JSON formatting its writer used (a JavaScript
    writer prints ``3e-7`` where Python would print ``3e-07``). The dict is the same entry,
    parsed, for whoever reads its fields."""

    def __init__(self, entry: Mapping[str, Any], text: str) -> None:
        super().__init__(entry)
        self.text = text


@dataclass
class ParsedLines:
    """A parsed file with where each part came from: the 1-based line numbers, and each
    entry's line text (None where the reader changed the entry: v2's renamed role)."""

    transcript: Transcript
    header_line: int
    entry_lines: list[int]
    entry_texts: list[str | None] = field(default_factory=list)


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        location = ".".join(str(part) for part in item["loc"]) or "(object)"
        parts.append(f"{location}: {item['msg']}")
    return "; ".join(parts)


def _check(model: type[BaseModel], obj: Mapping[str, Any], line: int, what: str) -> None:
    try:
        model.model_validate(obj)
    except ValidationError as error:
        raise TranscriptFormatError(line, f"invalid {what}: {_describe(error)}") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json_objects(raw: bytes, strict: bool) -> Iterable[tuple[int, Any, str]]:
    """Yield (line number, parsed value, line text) for every line that parses; skip the
    rest, or with ``strict`` raise for the first (NaN and Infinity, which Python would
    accept, count as not JSON there). Blank lines are skipped either way."""
    for number, chunk in enumerate(raw.split(b"\n"), start=1):
        if not chunk.strip():
            continue
        try:
            text = chunk.decode("utf-8").strip()
            value = (
                json.loads(text, parse_constant=_refuse_constant) if strict else json.loads(text)
            )
        except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            if strict:
                raise TranscriptFormatError(number, f"not a JSON line ({error})") from None
            continue  # the format says readers skip lines that do not parse
        yield number, value, text


def _header_version(header: Mapping[str, Any], line: int) -> int:
    version = header.get("version", 1)
    if isinstance(version, bool) or version not in SUPPORTED_VERSIONS:
        raise TranscriptFormatError(
            line, f"unsupported transcript version {version!r} (versions 1 to 3 are read)"
        )
    return int(version)


def _validate_header(obj: Any, line: int) -> int:
    if not isinstance(obj, dict) or obj.get("type") != "session":
        raise TranscriptFormatError(line, "the first entry must be the session header")
    version = _header_version(obj, line)
    _check(HeaderV1 if version == 1 else Header, obj, line, "session header")
    return version


def _validate_message(message: Mapping[str, Any], line: int) -> None:
    role = message.get("role")
    model = MESSAGE_MODELS.get(role, OtherMessage) if isinstance(role, str) else OtherMessage
    _check(model, message, line, f"{role if isinstance(role, str) else 'message'} message")


def check_entry(obj: Any, version: int, line: int) -> None:
    """Check one entry of a file of ``version`` (``TranscriptFormatError`` naming ``line``)."""
    if not isinstance(obj, dict):
        raise TranscriptFormatError(line, "an entry must be a JSON object")
    _check(LinearFields if version == 1 else TreeFields, obj, line, "entry")
    entry_type = obj["type"]
    model = ENTRY_MODELS.get(entry_type)
    if model is None:
        raise TranscriptFormatError(line, f"unknown entry type {entry_type!r}")
    if model is CompactionEntry and version == 1:
        model = CompactionEntryV1
    _check(model, obj, line, f"{entry_type} entry")
    if entry_type == "message":
        _validate_message(obj["message"], line)


def _normalize_v2(entry: dict[str, Any]) -> bool:
    """v3 renamed the message role ``hookMessage`` to ``custom``; nothing else changed.
    Returns whether the entry changed."""
    message = entry.get("message")
    if entry.get("type") != "message" or not isinstance(message, dict):
        return False
    if message.get("role") == "hookMessage":
        message["role"] = "custom"
        return True
    return False


_BOM = b"\xef\xbb\xbf"


def parse_lines(raw: bytes, *, strict: bool = False) -> ParsedLines:
    """Parse and check a file's bytes (``read_transcript``), keeping where each part came
    from. ``strict``: a line that is not JSON raises instead of being skipped, and an empty
    file says so."""
    if raw.startswith(_BOM):  # some editors on Windows begin UTF-8 files with one
        raw = raw[len(_BOM) :]
    if strict and not raw.strip():
        raise TranscriptFormatError(1, "the file is empty: no session header")
    objects = iter(_json_objects(raw, strict))
    first = next(objects, None)
    if first is None:
        raise TranscriptFormatError(1, "no session header: the file has no JSON lines")
    header_line, header, _ = first
    version = _validate_header(header, header_line)
    entries: list[dict[str, Any]] = []
    lines: list[int] = []
    texts: list[str | None] = []
    for line, obj, text in objects:
        changed = version < CURRENT_VERSION and isinstance(obj, dict) and _normalize_v2(obj)
        check_entry(obj, version, line)
        entries.append(obj)
        lines.append(line)
        texts.append(None if changed else text)
    return ParsedLines(Transcript(header=header, entries=entries), header_line, lines, texts)


def read_transcript(path: str | Path, *, strict: bool = False) -> Transcript:
    """Read and validate a transcript file of any supported version.

    Raises :class:`TranscriptFormatError` for a missing/invalid header or an invalid entry
    (with ``strict``, also for a line that is not JSON).
    """
    return parse_lines(Path(path).read_bytes(), strict=strict).transcript


# --------------------------------------------------------------------------- writing


def dump_lines(objects: Iterable[Mapping[str, Any]]) -> str:
    """Serialize JSON objects as compact JSONL, the byte form the reference writer uses; a
    :class:`VerbatimEntry` is written as the text it was read from."""
    return "".join(
        (
            obj.text
            if isinstance(obj, VerbatimEntry)
            else json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
        )
        + "\n"
        for obj in objects
    )


def dump_transcript(transcript: Transcript) -> str:
    """Render a transcript back to JSONL text: header line, then one line per entry."""
    return dump_lines([transcript.header, *transcript.entries])


# --------------------------------------------------------------------------- v3 checks


def check_tree(parsed: ParsedLines) -> None:
    """Entry ids are unique and every parentId is null or an earlier entry's id (v2+)."""
    seen: set[str] = set()
    for entry, line in zip(parsed.transcript.entries, parsed.entry_lines, strict=True):
        entry_id = entry["id"]
        if entry_id in seen:
            raise TranscriptFormatError(line, f"duplicate entry id {entry_id!r}")
        parent = entry["parentId"]
        # Requiring parents to come earlier also rules out cycles.
        if parent is not None and parent not in seen:
            raise TranscriptFormatError(line, f"parentId {parent!r} does not name an earlier entry")
        seen.add(entry_id)


def _leaf_paths(entries: list[dict[str, Any]]) -> Iterable[list[int]]:
    """Yield each root-to-leaf branch as a list of entry indexes."""
    index_of = {entry["id"]: i for i, entry in enumerate(entries)}
    has_child = {entry["parentId"] for entry in entries if entry["parentId"] is not None}
    for i, entry in enumerate(entries):
        if entry["id"] in has_child:
            continue
        path = []
        cursor: int | None = i
        while cursor is not None:
            path.append(cursor)
            parent = entries[cursor]["parentId"]
            cursor = index_of[parent] if parent is not None else None
        yield path[::-1]


def _tool_call_ids(entry: Mapping[str, Any]) -> list[str]:
    message = entry.get("message") if entry["type"] == "message" else None
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return []
    return [block["id"] for block in message["content"] if block["type"] == "toolCall"]


def _tool_result_id(entry: Mapping[str, Any]) -> str | None:
    message = entry.get("message") if entry["type"] == "message" else None
    if isinstance(message, dict) and message.get("role") == "toolResult":
        return str(message["toolCallId"])
    return None


def _first_unanswered_call(
    entries: list[dict[str, Any]], path: list[int]
) -> tuple[int, str, int] | None:
    """(entry index, call id, result count) of the earliest toolCall on ``path`` without
    exactly one later toolResult, or None. One backward pass keeps this linear in the path.
    """
    later_results: Counter[str] = Counter()
    problem = None
    for index in reversed(path):
        for call_id in reversed(_tool_call_ids(entries[index])):
            if later_results[call_id] != 1:
                problem = (index, call_id, later_results[call_id])  # earlier ones overwrite
        result_id = _tool_result_id(entries[index])
        if result_id is not None:
            later_results[result_id] += 1
    return problem


def _check_tool_results(parsed: ParsedLines) -> None:
    entries = parsed.transcript.entries
    # Every branch is checked, not only the current one: an export must be loadable from
    # whichever leaf a user resumes.
    for path in _leaf_paths(entries):
        problem = _first_unanswered_call(entries, path)
        if problem is not None:
            index, call_id, results = problem
            raise TranscriptFormatError(
                parsed.entry_lines[index],
                f"tool call {call_id!r} has {results} toolResult messages after it "
                "on its branch; expected exactly 1",
            )


def validate_v3(path: str | Path) -> Transcript:
    """Check that a file is a valid v3 export; return it parsed, or raise the first problem.

    On top of :func:`read_transcript`'s per-entry checks: the header is on line 1 with version 3,
    entry ids are unique, every parentId is null or an earlier entry's id, and every toolCall
    block is followed on its branch by exactly one toolResult with its id.
    """
    parsed = parse_lines(Path(path).read_bytes())
    if parsed.header_line != 1:
        raise TranscriptFormatError(1, "line 1 must be the session header")
    version = parsed.transcript.header.get("version")
    if version != CURRENT_VERSION or isinstance(version, bool):
        raise TranscriptFormatError(1, f"expected version 3, found {version!r}")
    check_tree(parsed)
    _check_tool_results(parsed)
    return parsed.transcript
