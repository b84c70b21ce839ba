"""Import of a real agent's session (Claude Code, Codex, Gemini CLI, against the stand-in
model server): its export, imported, exports again line for line but the header's id; and
the imported conversation, resumed in a new session of the same agent, reaches the model
with the new session's first prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from control_plane import ControlPlane
from protocol.transcript.reader import validate_v3

from .conftest import RealAgent
from .cp_helpers import API_OF, in_process

pytestmark = pytest.mark.timeout(300)


def test_a_real_agents_export_round_trips_through_an_import_and_resumes(
    real_agent: RealAgent, tmp_path: Path
) -> None:
    settings, spec = in_process(
        real_agent.name, real_agent.launch, tmp_path / "agent-logs", turn_timeout_s=120
    )
    server = real_agent.server
    with ControlPlane.open(tmp_path / "cp.db", settings=settings, subagent_tools=False) as cp:
        spawned = cp.spawn(spec, real_agent.cwd, "SAY the walrus said hello")
        assert spawned.command is not None
        sid = spawned.session.id
        assert cp.wait(spawned.command.id, 150).ok
        ran = cp.wait(cp.prompt(sid, "RUN echo carpenter-output").id, 150)
        assert ran.ok, ran
        exported = cp.export_jsonl(sid, tmp_path / "real.jsonl")
        original = validate_v3(exported)
        assert any(  # the export has a tool call and its result: the round trip covers them
            e["type"] == "message" and e["message"]["role"] == "toolResult"
            for e in original.entries
        )

        outcome = cp.import_transcript(exported, resume=spec)
        again = cp.export_jsonl(outcome.session.id, tmp_path / "again.jsonl")
        got, want = again.read_text().splitlines(), exported.read_text().splitlines()
        assert got[1:] == want[1:]
        assert json.loads(got[0]) == {**json.loads(want[0]), "id": outcome.session.id}

        assert outcome.resumed is not None
        before = len(server.requests)
        answer = cp.wait(cp.prompt(outcome.resumed.id, "SAY resumed fine").id, 150)
        assert answer.ok, answer
        assert "resumed fine" in answer.text
        sent = [r for r in server.requests[before:] if r.api == API_OF[real_agent.name]]
        bodies = [json.dumps(r.body) for r in sent]
        assert any("the walrus said hello" in b and "resumed fine" in b for b in bodies)
        assert any("imported from the transcript file real.jsonl" in b for b in bodies)
        validate_v3(cp.export_jsonl(outcome.resumed.id, tmp_path / "continued.jsonl"))
