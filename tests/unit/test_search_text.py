"""What of a log is searchable (store/search_text.py) and how durations and dates are read
(control_plane/timespec.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from control_plane.timespec import TimeSpecError, parse_duration, parse_since
from store.search_text import MAX_DOC_CHARS, prompt_text, turn_text


def _frame(update: dict[str, object]) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"update": update}})


def test_a_prompt_gives_its_texts_and_the_resources_it_names() -> None:
    payload = {
        "content": [
            {"type": "text", "text": "fix the build"},
            {"type": "resource_link", "uri": "file:///repo/Makefile", "name": "Makefile"},
            {"type": "resource", "resource": {"uri": "file:///repo/a.c", "text": "int x;"}},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
        ]
    }
    assert prompt_text(json.dumps(payload)) == (
        "fix the build\n\nfile:///repo/Makefile\n\nfile:///repo/a.c"
    )
    assert prompt_text("{}") == "" and prompt_text("not json") == ""


def test_a_turn_gives_its_message_as_streamed_and_each_tool_title_once() -> None:
    frames = [
        _frame({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}}),
        _frame(
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Refac"}}
        ),
        _frame({"sessionUpdate": "tool_call", "toolCallId": "1", "title": "Edit parser.py"}),
        _frame({"sessionUpdate": "tool_call_update", "toolCallId": "1", "title": "Edit parser.py"}),
        _frame(
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "tored."}}
        ),
        _frame({"sessionUpdate": "plan", "entries": []}),
        "garbage",
        json.dumps({"params": {"update": "not an object"}}),
    ]
    assert turn_text(frames) == "Refactored.\nEdit parser.py"


def test_a_huge_turn_is_cut_to_the_document_limit() -> None:
    chunk = _frame(
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x" * 10_000}}
    )
    assert len(turn_text([chunk] * 20)) == MAX_DOC_CHARS


def test_durations_and_points_in_time() -> None:
    assert parse_duration("30d") == 30 * 86400
    assert parse_duration("1d12h") == 36 * 3600
    assert parse_duration("90m") == 5400 and parse_duration("1.5h") == 5400
    assert parse_since("2h", now=10_000.0) == 10_000.0 - 7200
    assert parse_since("2026-12-01") == datetime(2026, 12, 1, tzinfo=UTC).timestamp()
    assert parse_since("2026-12-01T08:00Z") == datetime(2026, 12, 1, 8, tzinfo=UTC).timestamp()
    for bad in ("", "30", "d", "30 days", "-1d", "1y"):
        with pytest.raises(TimeSpecError):
            parse_duration(bad)
    with pytest.raises(TimeSpecError, match="neither a duration"):
        parse_since("yesterday")
