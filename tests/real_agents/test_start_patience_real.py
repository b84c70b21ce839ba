"""A real agent (Claude Code, Codex, Gemini CLI) whose start runs past
``timeouts.agent_start_s`` while it works is waited for (actors/session/agent_start.py,
``call_while_working``): its start is measured once, then run again with a timeout well
below it, and it still starts and answers."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from actors.agent_profiles import AgentProfile, AgentProfiles
from actors.session import agent_start
from actors.settings import RuntimeSettings
from control_plane import ControlPlane
from protocol.agent.permissions import Decision, PermissionPolicy
from state_machines import CommandState
from store import AgentSpec

from .conftest import RealAgent

pytestmark = pytest.mark.timeout(240)


def _settings(real_agent: RealAgent, tmp_path: Path, start_timeout_s: float) -> RuntimeSettings:
    profile = AgentProfile(env=dict(real_agent.launch.env), fs=real_agent.name != "gemini")
    return RuntimeSettings(
        permission_policy=PermissionPolicy(Decision.ALLOW),
        turn_timeout_s=90,
        agent_start_timeout_s=start_timeout_s,
        agent_nice=0,  # the patience is tested, not how a loaded machine treats a niced start
        agent_profiles=AgentProfiles({real_agent.name: profile}),
        log_dir=str(tmp_path / "agent-logs"),
    )


def _first_turn(real_agent: RealAgent, db: Path, settings: RuntimeSettings, say: str) -> float:
    """Start a session's agent for a first prompt, which it answers; the seconds its start
    took (from the spawn's commit to ``agent_started``, as the log stamps them)."""
    spec = AgentSpec(
        real_agent.name, tuple(real_agent.launch.argv), env=tuple(real_agent.launch.env.items())
    )
    with ControlPlane.open(db, settings=settings, subagent_tools=False) as cp:
        spawned = cp.spawn(spec, str(real_agent.cwd), f"SAY {say}")
        assert spawned.command is not None
        outcome = cp.wait(spawned.command.id, 150)
        log = cp.events(spawned.session.id)
        failed = [e.payload for e in log if e.kind == "agent_start_failed"]
        assert outcome.state is CommandState.COMPLETED, (outcome, failed)
        started = next(e for e in log if e.kind == "agent_started")
        return (started.created_at - log[0].created_at).total_seconds()


# Not Codex: its start takes about 0.1 s, with gaps of I/O in it; a timeout short enough for
# it to run past is short enough to fall in such a gap, where an agent that waits looks hung
# (under 2 % of a CPU). At the default 60 s no start of it comes near either.
@pytest.mark.parametrize("real_agent", ["claude", "gemini"], indirect=True)
def test_a_real_agents_start_past_the_timeout_is_waited_for_while_it_works(
    real_agent: RealAgent,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What is tested is the waiting; the cap on it (four timeouts) is tested with the example
    # agent, and here only makes a start on a busy test machine fail for being slower.
    monkeypatch.setattr(agent_start, "START_PATIENCE", 20)
    plain = _settings(real_agent, tmp_path, 60)
    # Two starts measured, the faster one kept (the first may pay for a cold cache).
    measured = min(
        _first_turn(real_agent, tmp_path / f"measure-{i}.db", plain, f"measure {i}")
        for i in range(2)
    )
    # The longer step of the start (spawn + initialize; session/new) is most of it here
    # (initialize: 80-90 %): with a third of the whole start as the timeout, it runs past
    # its first timeout unless the start gets more than twice as fast.
    timeout = measured / 3
    with caplog.at_level(logging.INFO, logger="actors.session.agent_start"):
        _first_turn(
            real_agent, tmp_path / "patience.db", _settings(real_agent, tmp_path, timeout), "again"
        )
    waited = [r.getMessage() for r in caplog.records if "still starting" in r.getMessage()]
    assert waited, f"a {measured:.2f} s start never ran past a {timeout:.2f} s timeout"
