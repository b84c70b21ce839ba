"""``acpctl sessions import`` / ``ControlPlane.import_transcript`` on a real store (each
backend): an imported session exports as the file it came from (every line byte for byte but
the header's id), is closed and read-only, searchable and replayed to clients; the same file
twice is one session; a bad file leaves nothing; a resumed session's first prompt carries the
conversation to a real agent process (the example agent)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from control_plane.export import export_session
from control_plane.importing import ImportOutcome, import_transcript
from control_plane.remote.frames import FrameCache
from protocol.face.replay import conversation_updates
from protocol.transcript.reader import TranscriptFormatError, validate_v3
from state_machines import SessionClosed, SessionState
from store import NewEvent, Store
from store.ops import imports
from store.queries.search import SearchFilters
from store.search_query import SearchQuery
from tests.support.cp_harness import example_agent, open_cp
from tests.support.direct_sql import query
from tests.support.transcript_script import GOLDEN_DIR

# The format's reference example (a copy of ../shared/reference/transcript-v3-example.jsonl,
# which the reader's tests check is the same file), and this project's own golden exports.
EXAMPLE = GOLDEN_DIR.parent / "transcript-v3-example.jsonl"
FILES = [EXAMPLE, *sorted(GOLDEN_DIR.glob("*.jsonl"))]


def assert_exports_as(store: Store, session_id: str, source: Path, out: Path) -> None:
    """The session's export is ``source`` line for line, byte for byte, but for the header's
    ``id``, which is the session's; and it is a valid v3 file."""
    export_session(store, session_id, out)
    got, want = out.read_bytes().split(b"\n"), source.read_bytes().split(b"\n")
    assert got[1:] == want[1:]
    header, original = json.loads(got[0]), json.loads(want[0])
    assert header["id"] == session_id
    assert list(header) == list(original)
    assert {**header, "id": original["id"]} == original
    validate_v3(out)


def counts(db: str) -> list[int]:
    """Sessions, events and search documents in the store."""
    return [
        query(db, f"SELECT count(*) FROM {table}")[0][0]
        for table in ("sessions", "events", "search_docs")
    ]


@pytest.mark.parametrize("source", FILES, ids=lambda p: p.stem)
def test_an_imported_transcript_exports_as_the_file_it_came_from(
    store: Store, tmp_path: Path, source: Path
) -> None:
    outcome = import_transcript(store, source)
    session = outcome.session
    assert outcome.created and outcome.resumed is None
    assert session.state is SessionState.CLOSED
    imported = session.metadata["imported"]
    original = json.loads(source.read_bytes().split(b"\n")[0])
    assert imported["headerId"] == original["id"] and imported["file"] == source.name
    assert imported["version"] == 3 and imported["entries"] == outcome.entries
    assert session.cwd == original["cwd"]
    kinds = [e.kind for e in store.events(session.id)]
    assert kinds == ["session_created", *["transcript_entry"] * outcome.entries, "closed"]
    assert_exports_as(store, session.id, source, tmp_path / "out.jsonl")


def test_an_imported_session_is_listed_read_only_and_replayed_to_clients(
    store: Store, db: str
) -> None:
    session = import_transcript(store, EXAMPLE).session
    assert [s.id for s in store.list_sessions()] == [session.id]
    with pytest.raises(SessionClosed):  # its log is final
        store.append_events(session.id, None, [NewEvent("prompt", {"content": []})])
    events = store.events(session.id)
    updates = list(conversation_updates(events))  # serve's session/load
    assert [u["sessionUpdate"] for u in updates] == [
        "user_message_chunk",
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
    ]
    assert updates[3]["content"][0]["content"]["text"] == "main.py\nutil.py\n"
    frames = FrameCache().frames(session.id, events)  # what the console's followers get
    assert [json.loads(f)["params"]["update"] for _, f in frames] == updates


@pytest.mark.backend_specific  # each backend has its own full-text index
def test_imported_messages_are_searchable(store: Store, db: str) -> None:
    session = import_transcript(store, EXAMPLE).session

    def found(text: str) -> list[str]:
        hits = store.search(SearchQuery.parse(text), SearchFilters(), 10)
        return [h.session.id for h in hits]

    assert found("files") == [session.id]  # the user's message
    assert found("contains") == [session.id]  # the assistant's answer
    assert found("bash") == [session.id]  # the name of the tool it called
    assert found("checkpoint") == []  # a label is not conversation
    rows = query(db, "SELECT role, seq, created_at FROM search_docs ORDER BY seq")
    # One document per message with text: the user's, the two answers (a tool result has none).
    assert [(r[0], r[1]) for r in rows] == [("user", 4), ("agent", 5), ("agent", 7)]
    assert rows[0][2] == pytest.approx(1773568801.0)  # the message's own time


def test_the_same_file_twice_is_one_session(store: Store, db: str, tmp_path: Path) -> None:
    first = import_transcript(store, EXAMPLE)
    before = counts(db)
    copy = tmp_path / "renamed.jsonl"
    copy.write_bytes(EXAMPLE.read_bytes())
    again = import_transcript(store, copy)
    assert (again.created, again.session.id) == (False, first.session.id)
    assert again.session.metadata["imported"]["file"] == EXAMPLE.name  # the first import's
    assert counts(db) == before


def test_a_bad_line_imports_nothing(store: Store, db: str, tmp_path: Path) -> None:
    lines = EXAMPLE.read_bytes().split(b"\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join([*lines[:5], b"{truncated", *lines[5:]]))
    with pytest.raises(TranscriptFormatError) as caught:
        import_transcript(store, bad)
    assert caught.value.line == 6
    assert counts(db) == [0, 0, 0]


def test_a_failure_inside_the_transaction_leaves_nothing(
    store: Store, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session, its entries and their search documents are one transaction: a failure at
    its last step (the close) undoes the rest."""

    def broken_close(*_: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(imports, "close_session", broken_close)
    with pytest.raises(RuntimeError, match="disk on fire"):
        import_transcript(store, EXAMPLE)
    assert counts(db) == [0, 0, 0]


def test_a_v1_file_is_imported_as_v3(store: Store, tmp_path: Path) -> None:
    header = {"type": "session", "id": "old", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/r"}
    message = {"role": "user", "content": "from long ago", "timestamp": 1}
    entry = {"type": "message", "timestamp": "2025-01-01T00:00:01.000Z", "message": message}
    source = tmp_path / "v1.jsonl"
    source.write_text(json.dumps(header) + "\n" + json.dumps(entry) + "\n")
    outcome = import_transcript(store, source)
    out = tmp_path / "out.jsonl"
    export_session(store, outcome.session.id, out)
    exported = validate_v3(out)
    assert exported.header == {**header, "id": outcome.session.id, "version": 3}
    (only,) = exported.entries
    assert only["message"] == message and only["parentId"] is None


@pytest.mark.timeout(120)
def test_an_example_agent_session_round_trips_and_resumes_with_its_conversation(
    tmp_path: Path, db: str
) -> None:
    agent = example_agent(tmp_path)
    with open_cp(tmp_path, db=db) as cp:
        spawned = cp.spawn(agent, tmp_path, "remember the walrus #tool")
        assert spawned.command is not None
        assert cp.wait(spawned.command.id, 60).ok
        assert cp.wait(cp.prompt(spawned.session.id, "#plan and the carpenter").id, 60).ok
        exported = cp.export_jsonl(spawned.session.id, tmp_path / "run.jsonl")

        outcome: ImportOutcome = cp.import_transcript(exported, resume=agent)
        assert outcome.created and outcome.resumed is not None
        assert_exports_as(cp._store, outcome.session.id, exported, tmp_path / "again.jsonl")
        resumed = outcome.resumed
        assert resumed.agent.name == "example-agent" and resumed.cwd == str(tmp_path)
        assert resumed.metadata["forkOf"]["imported"]["file"] == "run.jsonl"

        answer = cp.wait(cp.prompt(resumed.id, "what did I ask").id, 60)
        assert answer.ok
        # The example agent echoes its prompt: the seed came first, then the question.
        assert "imported from the transcript file run.jsonl" in answer.text
        assert answer.text.index("walrus") < answer.text.index("carpenter")
        assert answer.text.index("carpenter") < answer.text.index("what did I ask")
        (seed,) = cp.events_of_kinds(resumed.id, ("fork_seed",))
        assert seed.payload["chars"] > 0

        # The resumed session's export: the imported entries as they were, then its own turn.
        continued = validate_v3(cp.export_jsonl(resumed.id, tmp_path / "continued.jsonl"))
        imported_lines = exported.read_text().splitlines()[1:]
        continued_lines = (tmp_path / "continued.jsonl").read_text().splitlines()
        start = continued_lines.index(imported_lines[0])
        assert continued_lines[start : start + len(imported_lines)] == imported_lines
        last_imported = json.loads(imported_lines[-1])["id"]
        after = continued.entries[start - 1 + len(imported_lines)]
        assert after["parentId"] == last_imported
        assert cp.get(outcome.session.id).state is SessionState.CLOSED


@dataclass(frozen=True)
class _Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.mark.timeout(60)
def test_the_cli_imports_shows_and_refuses_bad_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from control_plane.cli import app

    db = str(tmp_path / "cp.db")
    monkeypatch.chdir(tmp_path)  # a resume works in the current directory here

    def acpctl(*args: str) -> _Ran:
        done = CliRunner().invoke(app, ["--db", db, "sessions", *args], env={"COLUMNS": "200"})
        return _Ran(done.exit_code, done.stdout, done.stderr)

    bad = tmp_path / "bad.jsonl"
    bad.write_text(EXAMPLE.read_text().replace('"model_change"', '"model_chnage"', 1))
    refused = acpctl("import", str(bad))
    assert refused.returncode == 2
    assert "line 2: unknown entry type 'model_chnage'" in refused.stderr
    assert "nothing was imported" in refused.stderr
    assert acpctl("import", str(tmp_path / "missing.jsonl")).returncode == 2
    assert acpctl("import", str(EXAMPLE), "--agent", "example").returncode == 2  # no --resume

    done = acpctl("import", str(EXAMPLE), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["created"] and report["entries"] == 12 and report["resumed"] is None
    sid = report["session"]
    twice = json.loads(acpctl("import", str(EXAMPLE), "--json").stdout)
    assert (twice["session"], twice["created"]) == (sid, False)
    shown = acpctl("show", sid)
    assert "imported from transcript-v3-example.jsonl" in shown.stdout.replace("\n", " ")
    out = tmp_path / "out.jsonl"
    assert acpctl("export", sid, "-o", str(out)).returncode == 0
    assert out.read_text().splitlines()[1:] == EXAMPLE.read_text().splitlines()[1:]

    resumed = acpctl("import", str(EXAMPLE), "--resume", "--agent", "example", "--json")
    assert resumed.returncode == 0, resumed.stderr
    continued = json.loads(resumed.stdout)["resumed"]
    assert continued["agent"] == "example-agent" and continued["cwd"] == str(tmp_path)
