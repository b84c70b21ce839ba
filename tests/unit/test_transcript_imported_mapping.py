"""The transcript mapping of imported entries (``transcript_entry`` events): an imported
session exports as its file, and a session that continues one exports the imported entries
as they were, then its own, chained to them, without reusing their ids."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

from protocol.transcript.mapping import transcript_entries
from protocol.transcript.reader import dump_lines
from store import EventRecord
from tests.support.transcript_script import SESSION, EventScript, StoredEvent, by_role
from tests.unit.test_transcript_reader import EXAMPLE, assistant, tool_result, user

LINES = EXAMPLE.read_text().splitlines()
HEADER = json.loads(LINES[0])


def stored(seq: int, kind: str, text: str) -> EventRecord:
    """As the store hands events out: with the payload's text (``raw``)."""
    return EventRecord(seq, SESSION.id, seq, None, kind, text, 1773568801.0)


def imported_log() -> list[EventRecord]:
    return [
        stored(1, "session_created", '{"agent":{"name":"anthropic"},"cwd":"/home/user/repo"}'),
        *(stored(i + 2, "transcript_entry", line) for i, line in enumerate(LINES[1:])),
        stored(len(LINES) + 1, "closed", '{"reason":"imported"}'),
    ]


def test_an_imported_session_exports_as_its_header_and_entries_alone() -> None:
    session = replace(SESSION, imported_header=HEADER)
    text = dump_lines(transcript_entries(session, imported_log()))
    lines = text.splitlines()
    assert lines[1:] == LINES[1:]
    assert json.loads(lines[0]) == {**HEADER, "id": SESSION.id}


def test_an_entry_is_written_back_as_its_text() -> None:
    spaced = (
        '{ "type": "custom", "id": "a1", "parentId": null, "timestamp": "t", '
        '"customType": "x", "data": 3e-7 }'
    )
    session = replace(SESSION, imported_header=HEADER)
    lines = dump_lines(transcript_entries(session, [stored(2, "transcript_entry", spaced)]))
    assert lines.splitlines()[1] == spaced
    # Without the text (an event that is not the store's), the entry's compact JSON.
    event = StoredEvent(2, "transcript_entry", json.loads(spaced))
    assert dump_lines(transcript_entries(session, [event])).splitlines()[1] == (
        '{"type":"custom","id":"a1","parentId":null,"timestamp":"t","customType":"x","data":3e-07}'
    )


def test_a_continued_session_chains_its_entries_to_the_last_imported_one() -> None:
    copied = [user("c3d4e5f6", None, "first"), assistant("f6a7b8c9", "c3d4e5f6", "call_1")]
    copied.append(tool_result("0a1b2c3d", "f6a7b8c9", "call_1"))
    script = EventScript()
    for entry in copied:
        script.add("transcript_entry", entry)
    # The new agent numbers its tool calls as the imported one did.
    script.prompt("again").tool("call_1").tool_update("call_1", "completed").end()
    entries = script.entries()
    assert entries[:3] == copied
    assert entries[3]["parentId"] == "0a1b2c3d"
    assert len({e["id"] for e in entries}) == len(entries)
    results = by_role(entries, "toolResult")
    assert [m["toolCallId"] for m in results] == ["call_1", "call_1~2"]
    assert results[1]["isError"] is False  # the agent's own update reached the renamed call


def test_imported_ids_are_kept_from_the_ids_the_mapping_makes() -> None:
    script = EventScript().prompt("hi").end()
    first_made = script.entries()[0]["id"]
    clash = user(first_made, None, "imported later in the log")
    script.add("transcript_entry", clash)
    entries = transcript_entries(SESSION, script.events)[1:]
    assert entries[0]["id"] != first_made  # the mapping's own id moved aside
    assert entries[-1] == clash


def test_a_header_without_a_version_is_exported_as_version_3() -> None:
    old = {"type": "session", "id": "x", "timestamp": "t", "cwd": "/r"}
    session = replace(SESSION, imported_header=old, created_at=datetime(2026, 1, 1, tzinfo=UTC))
    (header,) = transcript_entries(session, [])
    assert header == {**old, "id": SESSION.id, "version": 3}
