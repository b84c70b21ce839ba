"""An agent's start that runs past ``timeouts.agent_start_s`` while the agent keeps using CPU
(a busy host starves a niced agent) is waited for, up to four timeouts; one that uses no
CPU for a whole timeout is hung and fails then. Real processes, their CPU read from /proc."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from control_plane import CommandState, ControlPlane
from control_plane.serve.backend import BackendProbe
from store import AgentSpec
from tests.support.cp_harness import open_cp

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="Linux only (CPU time from /proc)"
)

EXAMPLE_AGENT = shlex.join([sys.executable, "-m", "protocol.example_agent"])


def _agent_after(prelude: str) -> AgentSpec:
    """The example agent, exec'd by a shell once ``prelude`` has run."""
    return AgentSpec("slow-start", ("sh", "-c", f"{prelude}; exec {EXAMPLE_AGENT}"))


def _start_errors(cp: ControlPlane, session_id: str) -> list[str]:
    return [
        str(e.payload.get("error")) for e in cp.events(session_id) if e.kind == "agent_start_failed"
    ]


@pytest.mark.timeout(90)
def test_a_start_that_keeps_working_past_the_timeout_is_waited_for(tmp_path: Path) -> None:
    """More than a timeout's worth of busy work before the agent even runs: it starts, and
    its first prompt is answered. (At the control plane's priority: what is tested is the
    patience, and a niced start on a loaded test machine could use up all four timeouts.)"""
    spin = "import time\nend = time.time() + 4.0\nwhile time.time() < end: pass"
    agent = _agent_after(shlex.join([sys.executable, "-c", spin]))
    with open_cp(tmp_path, agent_start_timeout_s=3.0, agent_nice=0) as cp:
        spawned = cp.spawn(agent, tmp_path, "hello")
        assert spawned.command is not None
        outcome = cp.wait(spawned.command.id, 60)
        assert outcome.state is CommandState.COMPLETED, _start_errors(cp, spawned.session.id)
        assert _start_errors(cp, spawned.session.id) == []
        assert "agent_started" in [e.kind for e in cp.events(spawned.session.id)]


@pytest.mark.timeout(90)
def test_serves_own_agent_start_has_the_same_patience(tmp_path: Path) -> None:
    """``acpctl serve``'s capability probe (the agent start behind a client's first
    ``initialize`` on a fresh store) waits for an agent that keeps working past the timeout,
    as a session's start does, and answers with what the agent said."""
    spin = "import time\nend = time.time() + 4.0\nwhile time.time() < end: pass"
    agent = _agent_after(shlex.join([sys.executable, "-c", spin]))
    with open_cp(tmp_path, agent_start_timeout_s=3.0, agent_nice=0) as cp:
        assert cp.agent_capabilities(agent.command) is None  # the probe has to start it
        started = time.monotonic()
        answer = BackendProbe(cp, agent).initialize()
        assert time.monotonic() - started > 3.0  # it did run past one timeout
        assert answer.get("protocolVersion") == 1, answer
        assert cp.agent_capabilities(agent.command) == answer


def _failed_start(tmp_path: Path, agent: AgentSpec, **settings: Any) -> tuple[str, float]:
    """Spawn with a first prompt whose agent never starts: the start's error and how long
    from the spawn to the failed prompt."""
    with open_cp(tmp_path, **settings) as cp:
        started = time.monotonic()
        spawned = cp.spawn(agent, tmp_path, "hello")
        assert spawned.command is not None
        outcome = cp.wait(spawned.command.id, 60)
        took = time.monotonic() - started
        assert outcome.state is CommandState.FAILED
        errors = _start_errors(cp, spawned.session.id)
        assert errors, "no agent_start_failed event"
        return errors[0], took


@pytest.mark.timeout(90)
def test_a_start_that_uses_no_cpu_fails_after_one_idle_timeout(tmp_path: Path) -> None:
    """An agent that sleeps instead of answering is hung: its start fails once a whole
    timeout passed without CPU (the first may still see the reaper's own start-up), long
    before the four timeouts a working agent may take."""
    error, took = _failed_start(tmp_path, _agent_after("sleep 60"), agent_start_timeout_s=1.5)
    assert "hung" in error, error
    assert took < 4 * 1.5, f"a hung start took {took:.1f} s"


@pytest.mark.timeout(90)
def test_a_start_that_works_past_four_timeouts_fails_saying_it_kept_working(
    tmp_path: Path,
) -> None:
    """The patience has an end: busy work that outlasts four timeouts fails the start at
    the fourth, and the error says the agent kept working (not that it hung)."""
    spin = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"
    agent = _agent_after(shlex.join([sys.executable, "-c", spin]))
    error, took = _failed_start(tmp_path, agent, agent_start_timeout_s=1.0, agent_nice=0)
    assert "kept working" in error, error
    assert 4.0 <= took < 20, f"the start failed after {took:.1f} s"
