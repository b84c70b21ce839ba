"""Behaviour of the event -> JSONL transcript v3 mapping (protocol/transcript/mapping.py): the
golden files, the header and entry ids, prompts and assistant output.

Golden files under tests/golden/transcript/ pin whole exports byte for byte; the unit tests
pin one rule each. To refresh goldens after an intended change run with
``TRANSCRIPT_GOLDEN_UPDATE=1``: the files are rewritten and the test still fails, so a changed
golden is always a reviewed diff, never a silent pass.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from protocol.transcript.mapping import (
    TranscriptSession,
    entry_id,
    transcript_entries,
)
from protocol.transcript.reader import dump_lines, validate_v3
from tests.support.transcript_script import (
    GOLDEN_DIR,
    SESSION,
    T0,
    UPDATE_ENV,
    EventScript,
    StoredEvent,
    by_role,
)

# --------------------------------------------------------------------------- golden files


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _load_golden_input(path: Path) -> tuple[TranscriptSession, list[StoredEvent]]:
    spec = json.loads(path.read_text(encoding="utf-8"))
    raw_session = spec["session"]
    session = TranscriptSession(
        id=raw_session["id"],
        cwd=raw_session["cwd"],
        created_at=_parse_time(raw_session["createdAt"]),
        agent_name=raw_session["agentName"],
        parent_session=raw_session.get("parentSession"),
    )
    events = [
        StoredEvent(raw["seq"], raw["kind"], raw["payload"], _parse_time(raw["createdAt"]))
        for raw in spec["events"]
    ]
    return session, events


GOLDEN_CASES = sorted(
    path.name.removesuffix(".events.json") for path in GOLDEN_DIR.glob("*.events.json")
)


@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_golden_events_map_to_exact_jsonl(case: str) -> None:
    session, events = _load_golden_input(GOLDEN_DIR / f"{case}.events.json")
    actual = dump_lines(transcript_entries(session, events))
    golden_path = GOLDEN_DIR / f"{case}.jsonl"
    if os.environ.get(UPDATE_ENV) == "1":
        golden_path.write_text(actual, encoding="utf-8", newline="\n")
        pytest.fail(f"rewrote {golden_path.name}; review the diff and rerun without {UPDATE_ENV}")
    expected = golden_path.read_text(encoding="utf-8") if golden_path.exists() else ""
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                fromfile=f"golden/{case}.jsonl",
                tofile="actual",
            )
        )
        pytest.fail(f"transcript differs from golden {case}.jsonl:\n{diff}")


def test_golden_cases_exist_and_every_expected_file_has_an_input() -> None:
    expected = sorted(path.name.removesuffix(".jsonl") for path in GOLDEN_DIR.glob("*.jsonl"))
    assert GOLDEN_CASES, "no golden inputs found"
    assert expected == GOLDEN_CASES


@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_golden_outputs_are_valid_v3_exports(case: str) -> None:
    transcript = validate_v3(GOLDEN_DIR / f"{case}.jsonl")
    assert transcript.version == 3
    assert transcript.entries


# --------------------------------------------------------------------------- header & ids


def test_header_comes_first_with_version_3_and_session_fields() -> None:
    header = transcript_entries(SESSION, [])[0]
    assert header == {
        "type": "session",
        "version": 3,
        "id": "sess-1",
        "timestamp": "2026-03-15T10:00:00.000Z",
        "cwd": "/repo",
    }


def test_forked_session_header_names_its_parent_session() -> None:
    forked = TranscriptSession("child", "/repo", T0, "claude-code", parent_session="sess-1")
    assert transcript_entries(forked, [])[0]["parentSession"] == "sess-1"


def test_entry_ids_are_eight_hex_chars_unique_and_chained_by_parent_id() -> None:
    entries = (
        EventScript().prompt().say("a").tool("t1").tool_update("t1", "completed").end().entries()
    )
    ids = [entry["id"] for entry in entries]
    assert all(re.fullmatch(r"[0-9a-f]{8}", entry_id_) for entry_id_ in ids)
    assert len(set(ids)) == len(ids)
    assert [entry["parentId"] for entry in entries] == [None, *ids[:-1]]


def test_same_events_give_identical_transcripts() -> None:
    script = EventScript().prompt().say("x").tool("t1").end()
    assert transcript_entries(SESSION, script.events) == transcript_entries(SESSION, script.events)


def test_entry_ids_depend_on_session_id() -> None:
    script = EventScript().prompt()
    other = TranscriptSession("sess-2", "/repo", T0, "claude-code")
    assert script.entries()[0]["id"] != script.entries(other)[0]["id"]


def test_entry_id_is_rehashed_when_the_natural_id_is_taken() -> None:
    natural = entry_id("seed", set())
    rehashed = entry_id("seed", {natural})
    assert rehashed != natural
    assert re.fullmatch(r"[0-9a-f]{8}", rehashed)


def test_events_are_mapped_in_seq_order_whatever_the_input_order() -> None:
    script = EventScript().prompt("first").end().prompt("second").end()
    shuffled = list(reversed(script.events))
    assert transcript_entries(SESSION, shuffled) == transcript_entries(SESSION, script.events)


def test_timestamps_are_iso_utc_millis_on_entries_and_epoch_ms_on_messages() -> None:
    plus_two = timezone(timedelta(hours=2))
    moment = datetime(2026, 3, 15, 12, 0, 1, 234567, tzinfo=plus_two)
    prompt = StoredEvent(1, "prompt", {"content": [{"type": "text", "text": "x"}]}, moment)
    entry = transcript_entries(SESSION, [prompt])[1]
    assert entry["timestamp"] == "2026-03-15T10:00:01.234Z"
    assert entry["message"]["timestamp"] == 1773568801234


# --------------------------------------------------------------------------- prompts


def test_all_text_prompt_becomes_one_string_joined_by_blank_lines() -> None:
    content = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    entries = EventScript().add("prompt", {"commandId": "c", "content": content}).entries()
    assert by_role(entries, "user")[0]["content"] == "one\n\ntwo"


def test_mixed_prompt_becomes_text_and_image_blocks() -> None:
    content = [
        {"type": "text", "text": "look"},
        {"type": "image", "data": "AAA=", "mimeType": "image/png"},
        {"type": "resource", "resource": {"uri": "file:///a.md", "text": "# A"}},
        {"type": "resource_link", "uri": "file:///b.pdf", "name": "b.pdf"},
        {"type": "audio", "data": "BBB=", "mimeType": "audio/wav"},
    ]
    entries = EventScript().add("prompt", {"commandId": "c", "content": content}).entries()
    assert by_role(entries, "user")[0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image", "data": "AAA=", "mimeType": "image/png"},
        {"type": "text", "text": "# A"},
        {"type": "text", "text": "file:///b.pdf"},
        {"type": "text", "text": "[audio: audio/wav]"},
    ]


# --------------------------------------------------------------------------- assistant output


def test_consecutive_message_chunks_merge_into_one_text_block() -> None:
    entries = EventScript().prompt().say("Hel").say("lo").end().entries()
    assert by_role(entries, "assistant")[0]["content"] == [{"type": "text", "text": "Hello"}]


def test_thought_chunks_become_a_thinking_block_before_the_text() -> None:
    entries = EventScript().prompt().think("hmm ").think("ok").say("Done").end().entries()
    assert by_role(entries, "assistant")[0]["content"] == [
        {"type": "thinking", "thinking": "hmm ok"},
        {"type": "text", "text": "Done"},
    ]


def test_assistant_message_names_the_agent_as_api_provider_and_model() -> None:
    message = by_role(EventScript().prompt().say("x").end().entries(), "assistant")[0]
    assert (message["api"], message["provider"], message["model"]) == ("claude-code",) * 3


def test_empty_agent_name_falls_back_to_a_non_empty_provider() -> None:
    nameless = TranscriptSession("sess-1", "/repo", T0, "")
    message = by_role(EventScript().prompt().say("x").end().entries(nameless), "assistant")[0]
    assert message["provider"] and message["api"] and message["model"]


@pytest.mark.parametrize(
    ("acp_reason", "stop_reason"),
    [
        ("end_turn", "stop"),
        ("max_tokens", "length"),
        ("max_turn_requests", "length"),
        ("refusal", "error"),
        ("cancelled", "aborted"),
    ],
)
def test_acp_stop_reason_maps_to_transcript_stop_reason(acp_reason: str, stop_reason: str) -> None:
    message = by_role(EventScript().prompt().say("x").end(acp_reason).entries(), "assistant")[0]
    assert message["stopReason"] == stop_reason


def test_turn_usage_maps_acp_token_counts_with_zero_cost() -> None:
    usage = {
        "inputTokens": 10,
        "outputTokens": 5,
        "cachedReadTokens": 3,
        "cachedWriteTokens": 2,
        "totalTokens": 20,
    }
    message = by_role(EventScript().prompt().say("x").end(usage=usage).entries(), "assistant")[0]
    assert message["usage"] == {
        "input": 10,
        "output": 5,
        "cacheRead": 3,
        "cacheWrite": 2,
        "totalTokens": 20,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }


def test_missing_usage_gives_zeros_and_missing_total_is_the_sum() -> None:
    no_usage = by_role(EventScript().prompt().say("x").end().entries(), "assistant")[0]["usage"]
    partial = {"inputTokens": 7, "outputTokens": 4}
    summed = by_role(EventScript().prompt().say("x").end(usage=partial).entries(), "assistant")[0][
        "usage"
    ]
    assert no_usage["totalTokens"] == 0 and no_usage["input"] == 0
    assert summed["totalTokens"] == 11


def test_turn_without_output_emits_no_assistant_message() -> None:
    entries = EventScript().prompt().end("end_turn").entries()
    assert by_role(entries, "assistant") == []


def test_cancelled_turn_without_output_emits_empty_aborted_message_with_error() -> None:
    message = by_role(EventScript().prompt().end("cancelled").entries(), "assistant")[0]
    assert message["content"] == []
    assert message["stopReason"] == "aborted"
    assert message["errorMessage"] == "the turn was cancelled"


def test_failed_turn_emits_error_message_with_the_failure() -> None:
    entries = (
        EventScript()
        .prompt()
        .say("partial")
        .add("turn_failed", {"commandId": "c", "error": "boom"})
        .entries()
    )
    message = by_role(entries, "assistant")[0]
    assert message["stopReason"] == "error"
    assert message["errorMessage"] == "boom"
    assert message["content"] == [{"type": "text", "text": "partial"}]
