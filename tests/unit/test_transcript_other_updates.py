"""The transcript mapping of everything but turns and tool calls (config, session info,
lifecycle, announces), the writer, and a property over any event sequence."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.transcript.mapping import (
    EventLike,
    transcript_entries,
    write_transcript,
)
from protocol.transcript.reader import read_transcript, validate_v3
from tests.support.transcript_script import (
    SESSION,
    T0,
    EventScript,
    StoredEvent,
    by_role,
)

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


def test_a_permission_request_and_its_settlement_are_lifecycle_entries_naming_it() -> None:
    """The request's tool call and options (carried for other nodes' clients) stay out: the
    tool call has its own entry; the settlement says how it ended."""
    requested = {
        "requestId": "acpctl-permission-1",
        "toolCallId": "call-1",
        "title": "Edit main.py",
        "toolCall": {"toolCallId": "call-1", "rawInput": {"path": "main.py"}},
        "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
    }
    settled = {"requestId": "acpctl-permission-1", "state": "answered", "optionId": "allow"}
    script = EventScript().add("permission_requested", requested)
    entries = script.add("permission_settled", {**settled, "decidedBy": "phone"}).entries()
    assert [e["data"] for e in entries] == [
        {
            "event": "permission_requested",
            "requestId": "acpctl-permission-1",
            "toolCallId": "call-1",
            "title": "Edit main.py",
        },
        {"event": "permission_settled", **settled, "decidedBy": "phone"},
    ]


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
