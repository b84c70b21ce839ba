"""Imported transcript entries as clients and agents see them: the ACP updates a replay sends
(protocol/transcript/replay.py, through protocol/face/replay.py), and the conversation a
resumed session's agent is seeded with (protocol/transcript/context.py, fork_seed.py)."""

from __future__ import annotations

import json
from typing import Any

from actors.session.fork_seed import seed_text
from protocol.face.replay import event_updates
from protocol.transcript.context import context_entries, current_branch, seed_lines
from protocol.transcript.reader import read_transcript
from protocol.transcript.replay import entry_updates
from store import EventRecord
from tests.unit.test_transcript_reader import EXAMPLE, assistant, entry, tool_result, user

META = {"acpctl": {"imported": True, "entryId": "a1"}}


def record(seq: int, kind: str, payload: dict[str, Any]) -> EventRecord:
    return EventRecord(seq, "s", seq, None, kind, json.dumps(payload), 0.0)


# --------------------------------------------------------------------------- ACP updates


def test_a_user_message_is_user_message_chunks() -> None:
    assert entry_updates(user("a1", None, "hello")) == [
        {
            "sessionUpdate": "user_message_chunk",
            "content": {"type": "text", "text": "hello"},
            "_meta": META,
        }
    ]
    blocks = [
        {"type": "text", "text": "see"},
        {"type": "image", "data": "QQ==", "mimeType": "image/png"},
    ]
    said = entry("a1", None, "message", message={"role": "user", "content": blocks, "timestamp": 1})
    assert [u["content"] for u in entry_updates(said)] == blocks


def test_an_assistant_message_is_text_thought_and_completed_tool_calls() -> None:
    message = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "text", "text": "Listing."},
            {"type": "toolCall", "id": "call_1", "name": "bash", "arguments": {"command": "ls"}},
        ],
    }
    updates = entry_updates(entry("a1", None, "message", message=message))
    assert updates == [
        {
            "sessionUpdate": "agent_thought_chunk",
            "content": {"type": "text", "text": "hmm"},
            "_meta": META,
        },
        {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "Listing."},
            "_meta": META,
        },
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_1",
            "title": "bash",
            "status": "completed",
            "rawInput": {"command": "ls"},
            "_meta": META,
        },
    ]


def test_a_tool_result_is_a_tool_call_update_with_its_content() -> None:
    (update,) = entry_updates(tool_result("a1", None, "call_1"))
    assert update["sessionUpdate"] == "tool_call_update" and update["toolCallId"] == "call_1"
    assert update["status"] == "completed"
    assert update["content"] == [{"type": "content", "content": {"type": "text", "text": "out"}}]
    failed = tool_result("a1", None, "call_1")
    failed["message"]["isError"] = True
    assert entry_updates(failed)[0]["status"] == "failed"


def test_entries_that_are_not_conversation_show_nothing() -> None:
    for other in read_transcript(EXAMPLE).entries:
        if other["type"] != "message":
            assert entry_updates(other) == []
    assert entry_updates(entry("a1", None, "message", message={"role": "bashExecution"})) == []


def test_the_replay_of_stored_events_shows_transcript_entries() -> None:
    event = record(2, "transcript_entry", user("a1", None, "hi"))
    assert event_updates(event) == entry_updates(user("a1", None, "hi"))


# --------------------------------------------------------------------------- the seed


def test_the_current_branch_leaves_abandoned_branches_out() -> None:
    entries = read_transcript(EXAMPLE).entries
    # The example's last entry (a branch summary) hangs off the first user message.
    assert [e["id"] for e in current_branch(entries)] == [
        "a1b2c3d4",
        "b2c3d4e5",
        "c3d4e5f6",
        "5f6a7b8c",
    ]
    assert seed_lines(entries) == [
        "User: List the files in src/",
        "(summary of an abandoned branch: Abandoned branch listed src/ files.)",
    ]


def test_a_compaction_replaces_what_it_compacted_with_its_summary() -> None:
    entries = [
        user("a1", None, "old question"),
        assistant("a2", "a1"),
        user("a3", "a2", "kept question"),
        entry("a4", "a3", "compaction", summary="S", firstKeptEntryId="a3", tokensBefore=9),
        user("a5", "a4", "new question"),
    ]
    assert [e["id"] for e in context_entries(entries)] == ["a4", "a3", "a5"]
    assert seed_lines(entries) == [
        "(summary of the earlier conversation: S)",
        "User: kept question",
        "User: new question",
    ]


def test_assistant_lines_keep_text_and_tool_calls_in_order() -> None:
    message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "toolCall", "id": "c", "name": "bash", "arguments": {}},
            {"type": "text", "text": "Done."},
        ],
    }
    lines = seed_lines([entry("a1", None, "message", message=message)])
    assert lines == ["Assistant: Let me look.", "(tool call: bash)", "Assistant: Done."]


def test_a_resumed_sessions_seed_has_the_transcript_then_the_turns_since() -> None:
    events = [
        record(1, "session_created", {}),
        record(2, "transcript_entry", user("a1", None, "first question")),
        record(3, "transcript_entry", assistant("a2", "a1")),
        record(4, "forked", {}),
        record(5, "prompt", {"content": [{"type": "text", "text": "second question"}]}),
        record(
            6,
            "session_update",
            {
                "params": {
                    "update": {"sessionUpdate": "agent_message_chunk", "content": {"text": "two"}}
                }
            },
        ),
        record(7, "turn_ended", {}),
    ]
    fork_of = {"session": "s", "turn": None, "imported": {"file": "x.jsonl", "headerId": "h"}}
    text = seed_text(events, fork_of)
    assert "imported from the transcript file x.jsonl (session h" in text
    body = text.split("<conversation>\n")[1].split("\n</conversation>")[0]
    assert body.splitlines() == [
        "User: first question",
        "Assistant: ok",
        "User: second question",
        "Assistant: two",
    ]
