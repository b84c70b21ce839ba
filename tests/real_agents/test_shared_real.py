"""Several sessions on one real agent process (Claude Code, Codex, Gemini CLI): ACP lets a
connection hold several sessions, and the control plane's agent pool (actors/agent_pool.py)
puts them there. Each session's log holds its own replies only, turns run at once, and
closing one session leaves the process to the others."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from control_plane import ControlPlane
from state_machines import CommandState
from state_machines.event_kinds import EventKind
from tests.support.cp_harness import message_chunks

from .conftest import RealAgent
from .cp_helpers import in_process

pytestmark = pytest.mark.timeout(180)


def _text(cp: ControlPlane, session_id: str) -> str:
    return "".join(message_chunks(cp.events(session_id)))


def _pids(cp: ControlPlane, session_id: str) -> list[int]:
    return [
        int(e.payload["pid"]) for e in cp.events(session_id) if e.kind == EventKind.AGENT_STARTED
    ]


def test_three_sessions_share_one_real_agent_process(real_agent: RealAgent, tmp_path: Path) -> None:
    settings, spec = in_process(
        real_agent.name,
        real_agent.launch,
        tmp_path / "agent-logs",
        sessions_per_process=3,
        turn_timeout_s=90,
        max_running_turns=4,
    )
    cwd = str(real_agent.cwd)
    with ControlPlane.open(tmp_path / "cp.db", settings=settings, subagent_tools=False) as cp:
        # The three first turns run at once, on one process.
        spawned = [cp.spawn(spec, cwd, f"SAY first reply of session {i}") for i in range(3)]
        for s in spawned:
            assert s.command is not None
            outcome = cp.wait(s.command.id, 120)
            assert outcome.state is CommandState.COMPLETED, outcome
        pids = {pid for s in spawned for pid in _pids(cp, s.session.id)}
        assert len(pids) == 1, pids
        (pid,) = pids
        # Each session's log has its own reply, none of the others'.
        for i, s in enumerate(spawned):
            text = _text(cp, s.session.id)
            assert f"first reply of session {i}" in text, text
            assert not any(f"session {j}" in text for j in range(3) if j != i), text
        # One session closes: the process stays for the others, which go on on it.
        cp.close_session(spawned[0].session.id)
        os.kill(pid, 0)
        for i, s in enumerate(spawned[1:], start=1):
            again = cp.prompt(s.session.id, f"SAY second reply of session {i}")
            assert cp.wait(again.id, 120).state is CommandState.COMPLETED
            assert f"second reply of session {i}" in _text(cp, s.session.id)
            assert _pids(cp, s.session.id) == [pid]
