"""Behaviour of the transcript reader/validator (protocol/transcript/reader.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from protocol.transcript.reader import (
    Transcript,
    TranscriptFormatError,
    dump_transcript,
    read_transcript,
    validate_v3,
)

# A copy of ../shared/reference/transcript-v3-example.jsonl (the format's reference example),
# kept in the repository so the tests do not depend on where shared/ is mounted.
EXAMPLE = Path(__file__).parent.parent / "golden" / "transcript-v3-example.jsonl"
HEADER = {
    "type": "session",
    "version": 3,
    "id": "s1",
    "timestamp": "2026-03-15T10:00:00.000Z",
    "cwd": "/repo",
}
ZERO_USAGE = {
    "input": 0,
    "output": 0,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 0,
    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
}


def write_lines(tmp_path: Path, *objects: Any, name: str = "t.jsonl") -> Path:
    """Write objects (dicts are JSON-encoded, strings written raw) one per line."""
    path = tmp_path / name
    lines = [obj if isinstance(obj, str) else json.dumps(obj) for obj in objects]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def entry(entry_id: str, parent: str | None, entry_type: str, **fields: Any) -> dict[str, Any]:
    return {
        "type": entry_type,
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2026-03-15T10:00:01.000Z",
        **fields,
    }


def user(entry_id: str, parent: str | None, text: str = "hi") -> dict[str, Any]:
    return entry(
        entry_id, parent, "message", message={"role": "user", "content": text, "timestamp": 1}
    )


def assistant(entry_id: str, parent: str | None, *call_ids: str) -> dict[str, Any]:
    blocks = [{"type": "toolCall", "id": c, "name": "bash", "arguments": {}} for c in call_ids]
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "ok"}, *blocks],
        "api": "a",
        "provider": "a",
        "model": "m",
        "usage": ZERO_USAGE,
        "stopReason": "toolUse" if call_ids else "stop",
        "timestamp": 2,
    }
    return entry(entry_id, parent, "message", message=message)


def tool_result(entry_id: str, parent: str | None, call_id: str) -> dict[str, Any]:
    message = {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": "bash",
        "content": [{"type": "text", "text": "out"}],
        "isError": False,
        "timestamp": 3,
    }
    return entry(entry_id, parent, "message", message=message)


# --------------------------------------------------------------------------- reading


def test_shared_example_round_trips_byte_for_byte() -> None:
    original = EXAMPLE.read_text(encoding="utf-8")
    assert dump_transcript(read_transcript(EXAMPLE)) == original


def test_shared_example_is_a_valid_v3_export() -> None:
    transcript = validate_v3(EXAMPLE)
    assert transcript.version == 3
    assert len(transcript.entries) == 12


def test_reader_preserves_unknown_fields_and_key_order(tmp_path: Path) -> None:
    custom = {"zeta": 1, **entry("a1", None, "custom", customType="x"), "alpha": [True]}
    transcript = read_transcript(write_lines(tmp_path, HEADER, custom))
    assert list(transcript.entries[0]) == list(custom)
    assert transcript.entries[0] == custom


def test_lines_that_do_not_parse_are_skipped(tmp_path: Path) -> None:
    path = write_lines(tmp_path, HEADER, "{not json", "", user("a1", None), "\x00garbage")
    assert [e["id"] for e in read_transcript(path).entries] == ["a1"]


def test_invalid_utf8_line_is_skipped(tmp_path: Path) -> None:
    path = write_lines(tmp_path, HEADER, user("a1", None))
    path.write_bytes(path.read_bytes() + b"\xff\xfe{}\n")
    assert len(read_transcript(path).entries) == 1


def test_missing_version_is_read_as_version_1_without_entry_ids(tmp_path: Path) -> None:
    header = {key: value for key, value in HEADER.items() if key != "version"}
    v1_user = {
        "type": "message",
        "timestamp": "t",
        "message": {"role": "user", "content": "x", "timestamp": 1},
    }
    v1_compaction = {
        "type": "compaction",
        "timestamp": "t",
        "summary": "s",
        "firstKeptEntryIndex": 1,
        "tokensBefore": 9,
    }
    transcript = read_transcript(write_lines(tmp_path, header, v1_user, v1_compaction))
    assert transcript.version == 1
    assert [e["type"] for e in transcript.entries] == ["message", "compaction"]


def test_version_2_hook_message_role_is_normalized_to_custom(tmp_path: Path) -> None:
    hook = {
        "role": "hookMessage",
        "customType": "ext",
        "content": "note",
        "display": True,
        "timestamp": 5,
    }
    path = write_lines(
        tmp_path, {**HEADER, "version": 2}, entry("a1", None, "message", message=hook)
    )
    transcript = read_transcript(path)
    assert transcript.version == 2
    assert transcript.entries[0]["message"]["role"] == "custom"


def test_version_3_hook_message_role_is_left_alone(tmp_path: Path) -> None:
    hook = {"role": "hookMessage", "timestamp": 5}
    path = write_lines(tmp_path, HEADER, entry("a1", None, "message", message=hook))
    assert read_transcript(path).entries[0]["message"]["role"] == "hookMessage"


@pytest.mark.parametrize("version", [0, 4, "3", True, None])
def test_unsupported_version_is_rejected_on_the_header_line(tmp_path: Path, version: Any) -> None:
    path = write_lines(tmp_path, "junk", {**HEADER, "version": version})
    with pytest.raises(TranscriptFormatError) as caught:
        read_transcript(path)
    assert caught.value.line == 2
    assert "version" in caught.value.reason


def test_file_without_a_header_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(TranscriptFormatError, match="session header"):
        read_transcript(write_lines(tmp_path, user("a1", None)))


def test_empty_file_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(TranscriptFormatError) as caught:
        read_transcript(write_lines(tmp_path))
    assert caught.value.line == 1


def test_format_error_is_a_value_error_carrying_the_line_number(tmp_path: Path) -> None:
    bad = entry("a2", "a1", "model_change", provider="p")  # modelId missing
    path = write_lines(tmp_path, HEADER, user("a1", None), bad)
    with pytest.raises(ValueError, match=r"^line 3: .*modelId") as caught:
        read_transcript(path)
    assert isinstance(caught.value, TranscriptFormatError)
    assert caught.value.line == 3


@pytest.mark.parametrize(
    ("bad_entry", "detail"),
    [
        (entry("a1", None, "session_info", name=7), "name"),
        (
            entry("a1", None, "custom_message", customType="c", content="x", display="yes"),
            "display",
        ),
        (entry("a1", None, "label", targetId=None, label="l"), "targetId"),
        (
            entry("a1", None, "compaction", summary="s", firstKeptEntryId="x", tokensBefore="9"),
            "tokensBefore",
        ),
        (entry("a1", None, "thinking_level_change", thinkingLevel=None), "thinkingLevel"),
        (entry("a1", None, "branch_summary", fromId="x"), "summary"),
        (entry("a1", None, "custom"), "customType"),
        ({"type": "custom", "id": "a1", "timestamp": "t", "customType": "c"}, "parentId"),
        ({**entry("a1", None, "custom", customType="c"), "id": 5}, "id"),
        (entry("a1", None, "teleport"), "unknown entry type"),
        ([1, 2], "JSON object"),
    ],
)
def test_entry_with_missing_or_mistyped_field_is_rejected(
    tmp_path: Path, bad_entry: Any, detail: str
) -> None:
    path = write_lines(tmp_path, HEADER, bad_entry)
    with pytest.raises(TranscriptFormatError, match=detail) as caught:
        read_transcript(path)
    assert caught.value.line == 2


@pytest.mark.parametrize(
    ("message", "detail"),
    [
        ({"role": "user", "content": [{"type": "image", "data": "x"}], "timestamp": 1}, "mimeType"),
        ({"role": "user", "content": "x", "timestamp": True}, "timestamp"),
        (
            {
                "role": "toolResult",
                "toolCallId": "c",
                "toolName": "t",
                "content": [],
                "isError": 0,
                "timestamp": 1,
            },
            "isError",
        ),
        (
            {
                "role": "assistant",
                "content": [],
                "api": "a",
                "provider": "p",
                "model": "m",
                "usage": ZERO_USAGE,
                "stopReason": "done",
                "timestamp": 1,
            },
            "stopReason",
        ),
        (
            {
                "role": "assistant",
                "content": [{"type": "toolCall", "id": "c", "name": "n", "arguments": []}],
                "api": "a",
                "provider": "p",
                "model": "m",
                "usage": ZERO_USAGE,
                "stopReason": "toolUse",
                "timestamp": 1,
            },
            "arguments",
        ),
        (
            {
                "role": "assistant",
                "content": [],
                "api": "a",
                "provider": "p",
                "model": "m",
                "usage": {**ZERO_USAGE, "cost": {}},
                "stopReason": "stop",
                "timestamp": 1,
            },
            "cost",
        ),
        ({"role": 3}, "role"),
    ],
)
def test_message_with_missing_or_mistyped_field_is_rejected(
    tmp_path: Path, message: Any, detail: str
) -> None:
    path = write_lines(tmp_path, HEADER, entry("a1", None, "message", message=message))
    with pytest.raises(TranscriptFormatError, match=detail):
        read_transcript(path)


def test_messages_of_other_agent_roles_are_accepted(tmp_path: Path) -> None:
    bash = {"role": "bashExecution", "command": "ls", "output": "", "exitCode": 0, "timestamp": 1}
    path = write_lines(tmp_path, HEADER, entry("a1", None, "message", message=bash))
    assert read_transcript(path).entries[0]["message"] == bash


def test_fractional_usage_costs_are_numbers(tmp_path: Path) -> None:
    path = write_lines(tmp_path, HEADER, assistant("a1", None))
    transcript = read_transcript(path)
    transcript.entries[0]["message"]["usage"]["cost"]["total"] = 0.00081
    path.write_text(dump_transcript(transcript), encoding="utf-8")
    assert read_transcript(path).entries[0]["message"]["usage"]["cost"]["total"] == 0.00081


# --------------------------------------------------------------------------- dumping


def test_dump_writes_compact_json_lines_keeping_non_ascii() -> None:
    transcript = Transcript(
        header=dict(HEADER), entries=[entry("a1", None, "session_info", name="Café ✓")]
    )
    text = dump_transcript(transcript)
    lines = text.split("\n")
    assert lines[-1] == "" and len(lines) == 3
    assert lines[1] == (
        '{"type":"session_info","id":"a1","parentId":null,'
        '"timestamp":"2026-03-15T10:00:01.000Z","name":"Café ✓"}'
    )


# --------------------------------------------------------------------------- validate_v3


def test_valid_linear_export_with_answered_tool_calls_passes(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path,
        HEADER,
        user("a1", None),
        assistant("a2", "a1", "c1", "c2"),
        tool_result("a3", "a2", "c1"),
        tool_result("a4", "a3", "c2"),
        assistant("a5", "a4"),
    )
    assert len(validate_v3(path).entries) == 5


def test_validate_rejects_older_versions(tmp_path: Path) -> None:
    path = write_lines(tmp_path, {**HEADER, "version": 2}, user("a1", None))
    with pytest.raises(TranscriptFormatError, match="expected version 3"):
        validate_v3(path)


def test_validate_requires_the_header_on_line_1(tmp_path: Path) -> None:
    path = write_lines(tmp_path, "not json", HEADER, user("a1", None))
    read_transcript(path)  # a lenient reader accepts it ...
    with pytest.raises(TranscriptFormatError, match="line 1 must be the session header"):
        validate_v3(path)  # ... but it is not a clean export


def test_validate_rejects_duplicate_entry_ids(tmp_path: Path) -> None:
    path = write_lines(tmp_path, HEADER, user("a1", None), user("a1", "a1"))
    with pytest.raises(TranscriptFormatError, match="duplicate entry id") as caught:
        validate_v3(path)
    assert caught.value.line == 3


def test_validate_rejects_parent_id_that_is_not_an_earlier_entry(tmp_path: Path) -> None:
    path = write_lines(tmp_path, HEADER, user("a1", "a2"), user("a2", None))
    with pytest.raises(TranscriptFormatError, match="does not name an earlier entry") as caught:
        validate_v3(path)
    assert caught.value.line == 2


def test_validate_rejects_tool_call_without_result(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path, HEADER, user("a1", None), assistant("a2", "a1", "c1"), assistant("a3", "a2")
    )
    with pytest.raises(TranscriptFormatError, match="'c1' has 0 toolResult") as caught:
        validate_v3(path)
    assert caught.value.line == 3


def test_validate_rejects_tool_call_with_two_results(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path,
        HEADER,
        assistant("a1", None, "c1"),
        tool_result("a2", "a1", "c1"),
        tool_result("a3", "a2", "c1"),
    )
    with pytest.raises(TranscriptFormatError, match="'c1' has 2 toolResult"):
        validate_v3(path)


def test_validate_rejects_result_that_precedes_its_tool_call(tmp_path: Path) -> None:
    path = write_lines(tmp_path, HEADER, tool_result("a1", None, "c1"), assistant("a2", "a1", "c1"))
    with pytest.raises(TranscriptFormatError, match="'c1' has 0 toolResult"):
        validate_v3(path)


def test_validate_checks_tool_results_on_every_branch(tmp_path: Path) -> None:
    # a2's call is answered on the branch through a3 but not on the branch ending at a4.
    path = write_lines(
        tmp_path,
        HEADER,
        user("a1", None),
        assistant("a2", "a1", "c1"),
        tool_result("a3", "a2", "c1"),
        entry("a4", "a2", "branch_summary", fromId="a3", summary="abandoned"),
    )
    with pytest.raises(TranscriptFormatError, match="'c1' has 0 toolResult"):
        validate_v3(path)


def test_validate_accepts_result_on_a_sibling_branch_only_where_it_belongs(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path,
        HEADER,
        user("a1", None),
        assistant("a2", "a1", "c1"),
        tool_result("a3", "a2", "c1"),
        entry("a4", "a1", "branch_summary", fromId="a3", summary="went back before the call"),
    )
    assert [e["id"] for e in validate_v3(path).entries] == ["a1", "a2", "a3", "a4"]
