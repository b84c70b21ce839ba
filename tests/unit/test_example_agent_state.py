"""The example agent's session journal (``protocol.example_agent.state``) on real files."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from protocol.example_agent.state import STATE_VERSION, SessionRecord, StateFile, Turn

ROOT = Path(__file__).resolve().parents[2]
REPLY = "x" * 1500  # a 100-chunk reply of 15 characters per chunk


def turn(i: int, reply: str = REPLY) -> Turn:
    return Turn(user=f"prompt {i} #chunks=100", message=f"prompt {i}", reply=reply)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def as_json(records: dict[str, SessionRecord]) -> dict[str, Any]:
    return {sid: rec.to_json() for sid, rec in records.items()}


def test_round_trip_of_several_sessions_and_turns(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "state.json")
    assert state.load_all() == {}  # a missing file reads as empty
    assert state.get("nope") is None
    a = SessionRecord(session_id="a", cwd="/w/a")
    b = SessionRecord(session_id="b", cwd="/w/b")
    state.save(a)
    state.save(b)
    for i in range(3):
        a.history.append(turn(i))
        state.save(a)
    b.mode, b.model, b.title = "plan", "example-large", "Title B"
    b.history.append(turn(10, reply="héllo\nwörld \u2028 ✓"))
    state.save(b)
    a.history.append(turn(3, reply=""))
    a.updated_at = "2030-01-01T00:00:00.000+00:00"
    state.save(a)

    loaded = StateFile(state.path).load_all()
    assert list(loaded) == ["a", "b"]
    assert as_json(loaded) == as_json({"a": a, "b": b})
    assert state.get("b") == b
    # One line per save, each carrying only what was new.
    journal = lines(state.path)
    assert len(journal) == 7
    assert {e["v"] for e in journal} == {STATE_VERSION} == {2}
    assert [len(e["turns"]) for e in journal] == [0, 0, 1, 1, 1, 1, 1]


def test_a_restarted_process_sees_everything_and_appends_only_new_turns(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    first = StateFile(path)
    rec = SessionRecord(session_id="s1", cwd="/w")
    other = SessionRecord(session_id="s2", cwd="/w", history=[turn(0), turn(1)])
    first.save(other)
    for i in range(50):
        rec.history.append(turn(i))
        first.save(rec)

    second = StateFile(path)  # a new process
    loaded = second.get("s1")
    assert loaded is not None and loaded == rec
    assert second.load_all()["s2"] == other
    before_lines, before_size = len(lines(path)), path.stat().st_size
    for i in range(50, 53):
        loaded.history.append(turn(i))
        loaded.mode = "plan"
        second.save(loaded)
        after_lines, after_size = len(lines(path)), path.stat().st_size
        assert after_lines == before_lines + 1
        grew = after_size - before_size
        assert len(REPLY) < grew < 2 * len(REPLY)  # one turn, not the whole state
        before_lines, before_size = after_lines, after_size
        last = lines(path)[-1]
        assert [t["message"] for t in last["turns"]] == [f"prompt {i}"]
        assert "replace_history" not in last

    third = StateFile(path).load_all()
    assert third["s1"] == loaded
    assert len(third["s1"].history) == 53
    assert third["s1"].mode == "plan"
    assert third["s2"] == other


def test_get_reads_one_session_among_many_and_a_save_after_it_appends_only_new_turns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``get`` parses only the lines that name the session (a long-used shared file holds
    every session any process ever had): the others' lines are not even parsed, a garbled
    one among them included; a save after it still appends only the new turns, and a session
    whose id only appears inside another's text is no match."""
    path = tmp_path / "state.json"
    writer = StateFile(path)
    others = [
        SessionRecord(session_id=f"other-{i}", cwd="/w", history=[turn(i)]) for i in range(200)
    ]
    for other in others:
        writer.save(other)
    wanted = SessionRecord(session_id="wanted", cwd="/w/x", history=[turn(0), turn(1)])
    writer.save(wanted)
    # A reply that is exactly the id: that line holds the needle too, and is parsed.
    mentions = SessionRecord(session_id="mentions", cwd="/w", history=[turn(0, "wanted")])
    writer.save(mentions)
    with path.open("ab") as fh:
        fh.write(b'{"v":2,"session_id":"other-garbled", not json\n')

    reader = StateFile(path)  # a new process
    with caplog.at_level(logging.WARNING):
        got = reader.get("wanted")
    assert got == wanted
    assert "skipping" not in caplog.text  # the garbled line of another session was not parsed
    assert reader.get("other-7") == others[7]
    assert reader.get("mentions") == mentions
    assert reader.get("nope") is None

    got.history.append(turn(2))
    reader.save(got)
    last = json.loads(path.read_bytes().splitlines()[-1])
    assert last["session_id"] == "wanted" and len(last["turns"]) == 1
    assert "replace_history" not in last
    assert StateFile(path).get("wanted") == got
    assert StateFile(path).load_all()["wanted"] == got


def test_a_torn_last_line_is_skipped_and_the_next_save_starts_a_fresh_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.json"
    writer = StateFile(path)
    rec = SessionRecord(session_id="s", cwd="/w")
    writer.save(rec)
    rec.history.append(turn(0))
    writer.save(rec)
    intact = path.read_bytes()
    rec.history.append(turn(1))
    writer.save(rec)
    full = path.read_bytes()
    # kill -9 in the middle of the third write: half of its line, no newline.
    path.write_bytes(full[: len(intact) + (len(full) - len(intact)) // 2])

    with caplog.at_level(logging.WARNING, logger="example_agent.state"):
        loaded = StateFile(path).load_all()
    assert [t.message for t in loaded["s"].history] == ["prompt 0"]
    assert "skipping unparsable line 3" in caplog.text

    restarted = StateFile(path)
    again = restarted.get("s")
    assert again is not None
    again.history.append(turn(2))
    restarted.save(again)
    assert path.read_bytes().count(b"\n") == 4  # torn fragment terminated, then our line
    assert [t.message for t in StateFile(path).load_all()["s"].history] == ["prompt 0", "prompt 2"]


def test_malformed_lines_are_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.json"
    good = {
        "v": 2,
        "session_id": "s",
        "cwd": "/w",
        "turns": [{"user": "u", "message": "m", "reply": "r"}],
    }
    bad = [
        "[1, 2]",
        json.dumps({"v": 2, "cwd": "/no-id"}),
        json.dumps({"v": 2, "session_id": "s", "mode": "plan", "turns": [{"user": "u"}]}),
        json.dumps({"v": 2, "session_id": "s", "turns": "not a list"}),
        "\xff\xfe garbage",
    ]
    path.write_text("\n".join([json.dumps(good), *bad, ""]), encoding="latin-1")
    with caplog.at_level(logging.WARNING, logger="example_agent.state"):
        loaded = StateFile(path).load_all()
    assert list(loaded) == ["s"]
    assert loaded["s"].mode == "default"  # the malformed line's header was not applied either
    assert [t.reply for t in loaded["s"].history] == ["r"]
    assert caplog.text.count("skipping") == len(bad)


def test_a_legacy_file_loads_and_is_converted_on_the_next_save(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    legacy = {
        "version": 1,
        "sessions": {
            "old1": SessionRecord("old1", "/w", mode="plan", history=[turn(0), turn(1)]).to_json(),
            "old2": SessionRecord("old2", "/v", title="T").to_json(),
            "broken": {"cwd": "/missing-id"},
        },
    }
    path.write_text(json.dumps(legacy, indent=1))  # exactly what version 1 wrote
    state = StateFile(path)
    loaded = state.load_all()
    assert sorted(loaded) == ["old1", "old2"]
    assert loaded["old1"].mode == "plan" and len(loaded["old1"].history) == 2
    assert loaded["old2"].title == "T"
    assert path.read_text().startswith("{\n")  # reading alone does not convert

    rec = loaded["old1"]
    rec.history.append(turn(2))
    state.save(rec)
    journal = lines(path)
    assert all(e["v"] == 2 for e in journal)
    assert [e["session_id"] for e in journal] == ["old1", "old2", "old1"]
    assert [len(e["turns"]) for e in journal] == [2, 0, 1]
    assert not list(tmp_path.glob("*.tmp"))

    rec.history.append(turn(3))
    state.save(rec)
    assert len(lines(path)) == 4
    fresh = StateFile(path).load_all()
    assert fresh["old1"] == rec and fresh["old2"] == loaded["old2"]


def test_a_compact_legacy_file_loads_and_is_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    old = SessionRecord("old", "/w", history=[turn(0)])
    path.write_text(json.dumps({"version": 1, "sessions": {"old": old.to_json()}}))
    state = StateFile(path)
    assert state.load_all() == {"old": old}
    new = SessionRecord("new", "/w", history=[turn(1)])
    state.save(new)
    assert StateFile(path).load_all() == {"old": old, "new": new}


def test_two_instances_interleaving_different_sessions_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    one, two = StateFile(path), StateFile(path)
    a = SessionRecord("a", "/w")
    b = SessionRecord("b", "/w")
    for i in range(20):
        a.history.append(turn(i))
        one.save(a)
        b.history.append(turn(100 + i))
        b.title = f"title {i}"
        two.save(b)
        if i % 7 == 0:
            one.load_all()  # reading the other's sessions must not disturb the bookkeeping
    assert len(lines(path)) == 40
    for state in (one, two, StateFile(path)):
        assert state.load_all() == {"a": a, "b": b}


def test_a_shrunk_history_replaces_the_stored_one(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    state = StateFile(path)
    rec = SessionRecord("s", "/w", history=[turn(0), turn(1), turn(2)])
    state.save(rec)
    rec.history = [turn(9)]
    state.save(rec)
    assert lines(path)[-1]["replace_history"] is True
    rec.history.append(turn(10))
    state.save(rec)
    assert StateFile(path).load_all() == {"s": rec}


def test_a_replaced_or_truncated_file_gets_the_full_history_again(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    state = StateFile(path)
    rec = SessionRecord("s", "/w", history=[turn(0)])
    state.save(rec)
    path.unlink()  # someone deleted the state file
    rec.history.append(turn(1))
    state.save(rec)
    assert StateFile(path).load_all() == {"s": rec}
    path.write_bytes(b"")  # ... or truncated it
    rec.history.append(turn(2))
    state.save(rec)
    assert StateFile(path).load_all() == {"s": rec}


CHILD = """
import os, signal, sys
from pathlib import Path
from protocol.example_agent.state import SessionRecord, StateFile, Turn

path, sid, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
state = StateFile(path)
rec = SessionRecord(session_id=sid, cwd="/w")
for i in range(count):
    rec.history.append(Turn(user=f"{sid} {i}", message=f"{sid} {i}", reply="r" * 1500))
    state.save(rec)
os.kill(os.getpid(), signal.SIGKILL)  # no clean exit: flushed lines must survive
"""


def test_concurrent_processes_lose_nothing_and_survive_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sids, count = [f"p{n}" for n in range(4)], 40
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(path), sid, str(count)], env=env)
        for sid in sids
    ]
    for proc in procs:
        assert proc.wait(timeout=60) == -signal.SIGKILL
    loaded = StateFile(path).load_all()
    assert sorted(loaded) == sids
    for sid in sids:
        assert [t.message for t in loaded[sid].history] == [f"{sid} {i}" for i in range(count)]
    assert len(lines(path)) == len(sids) * count
