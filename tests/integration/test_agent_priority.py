"""Agents run nicer than the control plane when configured (``limits.agent_nice``): the agent
and every process it starts, never the reaper, and only as far as the configuration says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from control_plane.config import ConfigError, load_config
from protocol.agent.reaper import reaper_argv
from protocol.example_agent import noop
from store import AgentSpec
from tests.support.cp_harness import open_cp

pytestmark = pytest.mark.timeout(60)

# What a process and its parent run at: "<own nice> <parent's nice>".
_REPORT = "import os; print(os.nice(0), os.getpriority(os.PRIO_PROCESS, os.getppid()))"
_BASE = os.nice(0)  # the test's own niceness: an agent's is relative to it


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the reaper is Linux-only")
def test_the_agent_and_its_children_run_nicer_and_the_reaper_does_not() -> None:
    # the agent is a shell; the child it starts reports its own niceness and the shell's
    child = f"{sys.executable} -c '{_REPORT}'"
    reaper = 'cut -d" " -f19 /proc/$PPID/stat'  # the shell's parent: the reaper
    argv = reaper_argv(("sh", "-c", f"{child}; {reaper}"), parent_pid=os.getpid(), nice=7)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    report, reaper_nice = done.stdout.splitlines()
    assert report.split() == [str(min(19, _BASE + 7))] * 2  # the child and the agent
    assert reaper_nice == str(_BASE)
    # without --nice, nothing changes
    plain = reaper_argv((sys.executable, "-c", _REPORT), parent_pid=os.getpid())
    assert "--nice" not in plain
    out = subprocess.run(plain, capture_output=True, text=True, timeout=30, check=True).stdout
    assert out.split()[0] == str(_BASE)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the reaper is Linux-only")
def test_the_reaper_refuses_a_niceness_out_of_range() -> None:
    argv = list(reaper_argv(("true",), parent_pid=os.getpid(), nice=3))
    argv[argv.index("--nice") + 1] = "20"
    done = subprocess.run(argv, capture_output=True, timeout=30)
    assert done.returncode == 2 and b"--nice 20" in done.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the reaper is Linux-only")
def test_a_session_agent_runs_at_the_configured_niceness(tmp_path: Path) -> None:
    seen = tmp_path / "agent-nice"
    # A real session's agent: a shell that notes its niceness, then becomes the noop agent.
    wrapper = f'cut -d" " -f19 /proc/$$/stat > {seen}; exec "$@"'
    agent = AgentSpec("nice-probe", ("sh", "-c", wrapper, "sh", *noop.command()))
    with open_cp(tmp_path, agent_nice=5) as cp:
        spawned = cp.spawn(agent, tmp_path, "hello")
        assert spawned.command is not None
        assert cp.wait(spawned.command.id, 30).text == "Echo: hello"
    assert seen.read_text().strip() == str(min(19, _BASE + 5))
    assert os.nice(0) == _BASE  # the control plane's own threads were not touched


def test_the_configuration_sets_it_and_refuses_what_is_out_of_range(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[limits]\nagent_nice = 10\n")
    assert load_config(str(config), environ={}).runtime_settings().agent_nice == 10
    env = {"ACPCTL_AGENT_NICE": "4"}
    assert load_config(str(config), environ=env).runtime_settings().agent_nice == 4
    default = load_config(None, environ={"XDG_CONFIG_HOME": str(tmp_path)})
    assert default.limits.agent_nice == 10 == default.runtime_settings().agent_nice
    for bad in ("-1", "20"):
        with pytest.raises(ConfigError, match="agent_nice"):
            load_config(str(config), environ={"ACPCTL_AGENT_NICE": bad})
