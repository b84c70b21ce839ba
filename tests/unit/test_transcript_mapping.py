"""Behaviour of the event -> JSONL transcript v3 mapping (protocol/transcript/mapping.py).

Golden files under tests/golden/transcript/ pin whole exports byte for byte; the unit tests
below pin one rule each. To refresh goldens after an intended change run with
``TRANSCRIPT_GOLDEN_UPDATE=1``: the files are rewritten and the test still fails, so a changed
golden is always a reviewed diff, never a silent pass.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.transcript.mapping import (
    EventLike,
    TranscriptSession,
    entry_id,
    transcript_entries,
    write_transcript,
)
from protocol.transcript.reader import dump_lines, read_transcript, validate_v3

GOLDEN_DIR = Path(__file__).parent.parent / "golden" / "transcript"
UPDATE_ENV = "TRANSCRIPT_GOLDEN_UPDATE"
T0 = datetime(2026, 3, 15, 10, 0, 0, tzinfo=UTC)
SESSION = TranscriptSession(id="sess-1", cwd="/repo", created_at=T0, agent_name="claude-code")


@dataclass(frozen=True)
class StoredEvent:
    seq: int
    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    created_at: datetime = T0


class EventScript:
    """Builds a seq-numbered event list one second apart, as the store would record it."""

    def __init__(self) -> None:
        self.events: list[StoredEvent] = []

    def add(self, kind: str, payload: Mapping[str, Any] | None = None) -> EventScript:
        seq = len(self.events) + 1
        moment = T0 + timedelta(seconds=seq)
        self.events.append(StoredEvent(seq, kind, payload or {}, moment))
        return self

    def update(self, update_kind: str, /, **fields: Any) -> EventScript:
        return self.add(
            "session_update",
            {"sessionId": "sess-1", "update": {"sessionUpdate": update_kind, **fields}},
        )

    def prompt(self, text: str = "hi") -> EventScript:
        return self.add("prompt", {"commandId": "c", "content": [{"type": "text", "text": text}]})

    def say(self, text: str) -> EventScript:
        return self.update("agent_message_chunk", content={"type": "text", "text": text})

    def think(self, text: str) -> EventScript:
        return self.update("agent_thought_chunk", content={"type": "text", "text": text})

    def tool(self, call_id: str, status: str = "pending", **fields: Any) -> EventScript:
        return self.update("tool_call", toolCallId=call_id, status=status, **fields)

    def tool_update(self, call_id: str, status: str, **fields: Any) -> EventScript:
        return self.update("tool_call_update", toolCallId=call_id, status=status, **fields)

    def end(self, stop_reason: str = "end_turn", usage: Any = None) -> EventScript:
        return self.add("turn_ended", {"commandId": "c", "stopReason": stop_reason, "usage": usage})

    def entries(self, session: TranscriptSession = SESSION) -> list[dict[str, Any]]:
        return transcript_entries(session, self.events)[1:]


def messages(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [entry["message"] for entry in entries if entry["type"] == "message"]


def by_role(entries: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    return [message for message in messages(entries) if message["role"] == role]


def text_result(text: str) -> list[dict[str, Any]]:
    return [{"type": "content", "content": {"type": "text", "text": text}}]


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


# --------------------------------------------------------------------------- tool calls


def test_completed_tool_call_flushes_tool_use_message_then_tool_result() -> None:
    entries = (
        EventScript()
        .prompt()
        .say("Listing.")
        .tool("t1", title="bash", kind="execute", rawInput={"command": "ls"})
        .tool_update("t1", "completed", content=text_result("a.py\n"))
        .say("Done.")
        .end()
        .entries()
    )
    roles = [(m["role"], m.get("stopReason")) for m in messages(entries)]
    assert roles == [
        ("user", None),
        ("assistant", "toolUse"),
        ("toolResult", None),
        ("assistant", "stop"),
    ]
    tool_use, result = messages(entries)[1:3]
    assert tool_use["content"][1] == {
        "type": "toolCall",
        "id": "t1",
        "name": "bash",
        "arguments": {"command": "ls"},
    }
    assert tool_use["usage"]["totalTokens"] == 0
    assert result == {
        "role": "toolResult",
        "toolCallId": "t1",
        "toolName": "bash",
        "content": [{"type": "text", "text": "a.py\n"}],
        "isError": False,
        "timestamp": result["timestamp"],
    }


def test_tool_call_announced_already_completed_gets_its_result_immediately() -> None:
    entries = (
        EventScript()
        .prompt()
        .tool("t1", "completed", title="read", content=text_result("x"))
        .end()
        .entries()
    )
    assert [m["role"] for m in messages(entries)] == ["user", "assistant", "toolResult"]


def test_failed_tool_call_result_is_marked_as_error() -> None:
    entries = (
        EventScript()
        .prompt()
        .tool("t1")
        .tool_update("t1", "failed", content=text_result("denied"))
        .end()
        .entries()
    )
    result = by_role(entries, "toolResult")[0]
    assert result["isError"] is True
    assert result["content"] == [{"type": "text", "text": "denied"}]


def test_tool_name_falls_back_from_title_to_kind_to_tool() -> None:
    entries = (
        EventScript()
        .prompt()
        .tool("a", title="Read x", kind="read")
        .tool("b", kind="edit")
        .tool("c")
        .end()
        .entries()
    )
    calls = by_role(entries, "assistant")[0]["content"]
    assert [call["name"] for call in calls] == ["Read x", "edit", "tool"]


def test_non_object_raw_input_becomes_empty_arguments() -> None:
    entries = EventScript().prompt().tool("t1", rawInput="ls -la").end().entries()
    assert by_role(entries, "assistant")[0]["content"][0]["arguments"] == {}


def test_tool_call_update_before_flush_updates_name_and_arguments() -> None:
    entries = (
        EventScript()
        .prompt()
        .tool("t1")
        .tool_update("t1", "in_progress", title="grep", rawInput={"pattern": "x"})
        .tool_update("t1", "completed")
        .entries()
    )
    call = by_role(entries, "assistant")[0]["content"][0]
    assert (call["name"], call["arguments"]) == ("grep", {"pattern": "x"})
    assert by_role(entries, "toolResult")[0]["toolName"] == "grep"


def test_dangling_tool_call_gets_synthesized_error_result_at_turn_end() -> None:
    entries = EventScript().prompt().tool("t1", title="bash").say("gave up").end().entries()
    result = by_role(entries, "toolResult")[0]
    assert result["toolCallId"] == "t1"
    assert result["isError"] is True
    assert "before the tool call finished" in result["content"][0]["text"]
    assert messages(entries)[-1] is result


def test_interrupted_turn_is_aborted_with_synthesized_results_and_a_lifecycle_entry() -> None:
    entries = (
        EventScript()
        .prompt()
        .tool("t1", "in_progress")
        .add(
            "interrupted",
            {"commandId": "c", "attempts": 1, "willRetry": True, "reason": "agent crashed"},
        )
        .entries()
    )
    assistant, result = messages(entries)[1:]
    assert assistant["stopReason"] == "aborted"
    assert assistant["errorMessage"] == "agent crashed"
    assert result["isError"] is True and "agent crashed" in result["content"][0]["text"]
    assert entries[-1]["customType"] == "acp-control-plane"
    assert entries[-1]["data"] == {
        "event": "interrupted",
        "commandId": "c",
        "attempts": 1,
        "willRetry": True,
        "reason": "agent crashed",
    }


def test_open_turn_at_end_of_events_is_aborted_and_tool_calls_get_session_ended_result() -> None:
    entries = EventScript().prompt().say("working").tool("t1").entries()
    assistant, result = messages(entries)[1:]
    assert assistant["stopReason"] == "aborted"
    assert result["content"] == [
        {"type": "text", "text": "session ended before the tool call finished"}
    ]


def test_parallel_tool_calls_each_get_exactly_one_result() -> None:
    entries = (
        EventScript()
        .prompt()
        .tool("a")
        .tool("b")
        .tool_update("a", "completed", content=text_result("A"))
        .tool_update("b", "completed", content=text_result("B"))
        .end()
        .entries()
    )
    assert [m["toolCallId"] for m in by_role(entries, "toolResult")] == ["a", "b"]
    assert len(by_role(entries, "assistant")) == 1


def test_late_update_for_a_finished_tool_call_adds_no_second_result() -> None:
    entries = (
        EventScript()
        .prompt()
        .tool("t1")
        .tool_update("t1", "completed", content=text_result("ok"))
        .tool_update("t1", "completed", content=text_result("again"))
        .end()
        .entries()
    )
    assert [m["content"] for m in by_role(entries, "toolResult")] == [
        [{"type": "text", "text": "ok"}]
    ]


def test_reused_tool_call_id_in_a_later_turn_gets_a_distinct_block_id() -> None:
    script = (
        EventScript().prompt().tool("t1", "completed").end().prompt().tool("t1", "completed").end()
    )
    assert [m["toolCallId"] for m in by_role(script.entries(), "toolResult")] == ["t1", "t1~2"]


def test_update_for_an_unannounced_tool_call_creates_the_call() -> None:
    entries = EventScript().prompt().tool_update("t9", "completed", title="fetch").end().entries()
    assert by_role(entries, "assistant")[0]["content"][0]["id"] == "t9"
    assert by_role(entries, "toolResult")[0]["toolName"] == "fetch"


def test_diff_tool_content_is_rendered_as_unified_diff_text() -> None:
    diff = [{"type": "diff", "path": "/r/a.py", "oldText": "x = 1\n", "newText": "x = 2\n"}]
    entries = EventScript().prompt().tool("t1", "completed", content=diff).entries()
    text = by_role(entries, "toolResult")[0]["content"][0]["text"]
    assert text == "--- /r/a.py\n+++ /r/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2"


def test_raw_output_is_the_result_when_a_tool_reports_no_content() -> None:
    entries = EventScript().prompt().tool("t1", "completed", rawOutput={"exit": 0}).entries()
    assert by_role(entries, "toolResult")[0]["content"] == [{"type": "text", "text": '{"exit":0}'}]


# --------------------------------------------------------------------------- other updates


@pytest.mark.parametrize(
    "kind",
    [
        "plan",
        "available_commands_update",
        "current_mode_update",
        "usage_update",
        "user_message_chunk",
        "brand_new_kind",
    ],
)
def test_non_conversation_update_becomes_custom_entry_with_raw_update(kind: str) -> None:
    entries = EventScript().update(kind, detail=[1, 2]).entries()
    assert entries == [
        {
            **entries[0],
            "type": "custom",
            "customType": kind,
            "data": {"sessionUpdate": kind, "detail": [1, 2]},
        }
    ]


def model_option(value: str) -> dict[str, Any]:
    return {
        "id": "model",
        "name": "Model",
        "category": "model",
        "type": "select",
        "currentValue": value,
        "options": [],
    }


def test_model_config_option_change_emits_model_change_and_sets_assistant_model() -> None:
    entries = (
        EventScript()
        .update("config_option_update", configOptions=[model_option("opus")])
        .update("config_option_update", configOptions=[model_option("opus")])
        .prompt()
        .say("x")
        .end()
        .entries()
    )
    changes = [entry for entry in entries if entry["type"] == "model_change"]
    assert [(c["provider"], c["modelId"]) for c in changes] == [("claude-code", "opus")]
    assert [entry["customType"] for entry in entries if entry["type"] == "custom"] == [
        "config_option_update"
    ] * 2
    assert by_role(entries, "assistant")[0]["model"] == "opus"


def test_non_model_config_option_does_not_change_the_model() -> None:
    option = {**model_option("high"), "category": "thought_level"}
    entries = EventScript().update("config_option_update", configOptions=[option]).entries()
    assert [entry["type"] for entry in entries] == ["custom"]


def test_session_info_title_becomes_session_info_name() -> None:
    entries = EventScript().update("session_info_update", title="Fix tests").entries()
    assert entries[0]["type"] == "session_info"
    assert entries[0]["name"] == "Fix tests"


def test_session_info_update_without_title_is_kept_as_custom() -> None:
    entries = (
        EventScript().update("session_info_update", updatedAt="2026-03-15T10:00:00Z").entries()
    )
    assert (entries[0]["type"], entries[0]["customType"]) == ("custom", "session_info_update")


@pytest.mark.parametrize(
    "kind", ["session_created", "agent_exited", "context_lost", "closed", "mystery_event"]
)
def test_lifecycle_and_unknown_events_become_control_plane_custom_entries(kind: str) -> None:
    entries = EventScript().add(kind, {"reason": "r", "event": "ignored"}).entries()
    assert entries[0]["customType"] == "acp-control-plane"
    assert entries[0]["data"] == {"event": kind, "reason": "r"}


def test_malformed_session_update_is_kept_without_crashing() -> None:
    entries = EventScript().add("session_update", {"sessionId": "s", "update": "garbage"}).entries()
    assert entries[0]["data"] == {"event": "session_update", "sessionId": "s", "update": "garbage"}


def test_subagent_announce_becomes_displayed_custom_message_with_summary() -> None:
    payload = {
        "childSessionId": "kid",
        "status": "ok",
        "text": "All good.",
        "usage": None,
        "durationMs": 5,
    }
    entry = EventScript().add("announce", payload).entries()[0]
    assert entry["type"] == "custom_message"
    assert entry["customType"] == "subagent-announce"
    assert entry["content"] == "[subagent kid done] status=ok\nAll good."
    assert entry["display"] is True
    assert entry["details"] == payload


# --------------------------------------------------------------------------- writer


def test_write_transcript_writes_valid_v3_file_and_returns_line_count(tmp_path: Path) -> None:
    script = EventScript().prompt().say("x").tool("t1").end()
    target = tmp_path / "session.jsonl"
    target.write_text("stale\n", encoding="utf-8")
    count = write_transcript(target, SESSION, script.events)
    transcript = validate_v3(target)
    assert (
        count == len(target.read_text(encoding="utf-8").splitlines()) == 1 + len(transcript.entries)
    )
    assert [transcript.header, *transcript.entries] == transcript_entries(SESSION, script.events)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["session.jsonl"]


def test_failed_write_keeps_the_previous_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "s.jsonl"
    target.write_text("previous export\n", encoding="utf-8")
    unserializable = StoredEvent(1, "closed", {"reason": object()})
    with pytest.raises(TypeError):
        write_transcript(target, SESSION, [unserializable])
    assert target.read_text(encoding="utf-8") == "previous export\n"
    assert list(tmp_path.iterdir()) == [target]


# --------------------------------------------------------------------------- property


_blocks = st.sampled_from(
    [
        {"type": "text", "text": "t"},
        {"type": "image", "data": "AA==", "mimeType": "image/png"},
        {"type": "audio"},
        {},
    ]
)
_update_kinds = st.sampled_from(
    [
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "config_option_update",
        "session_info_update",
        "zzz",
    ]
)


@st.composite
def _event(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    kind = draw(
        st.sampled_from(
            [
                "prompt",
                "session_update",
                "session_update",
                "session_update",
                "turn_ended",
                "turn_failed",
                "interrupted",
                "agent_exited",
                "announce",
                "closed",
                "weird",
            ]
        )
    )
    if kind != "session_update":
        return kind, {
            "content": draw(st.lists(_blocks, max_size=3)),
            "stopReason": draw(
                st.sampled_from(["end_turn", "cancelled", "refusal", "bogus", None])
            ),
            "usage": draw(st.sampled_from([None, {"inputTokens": 3}, "bad"])),
            "reason": "r",
            "error": "e",
        }
    update: dict[str, Any] = {"sessionUpdate": draw(_update_kinds)}
    update["content"] = draw(_blocks)
    update["toolCallId"] = draw(st.sampled_from(["a", "b", "c", None]))
    update["status"] = draw(
        st.sampled_from(["pending", "in_progress", "completed", "failed", None])
    )
    update["rawInput"] = draw(st.sampled_from([{"k": 1}, "str", None]))
    update["title"] = draw(st.sampled_from(["T", None]))
    update["configOptions"] = [model_option(draw(st.sampled_from(["m1", "m2"])))]
    return kind, {"sessionId": "sess-1", "update": update}


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(_event(), max_size=25))
def test_any_event_sequence_maps_to_a_valid_v3_export(
    tmp_path: Path, raw_events: list[tuple[str, dict[str, Any]]]
) -> None:
    events: list[EventLike] = [
        StoredEvent(i, kind, payload, T0 + timedelta(milliseconds=i))
        for i, (kind, payload) in enumerate(raw_events)
    ]
    target = tmp_path / "prop.jsonl"
    count = write_transcript(target, SESSION, events)
    transcript = validate_v3(target)
    assert count == 1 + len(transcript.entries)
    assert read_transcript(target).entries == transcript.entries
