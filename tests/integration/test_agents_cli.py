"""``acpctl agents list/show/doctor`` and agents by name where ``--agent`` is taken: real
subprocesses, a real config file, a real initialize handshake with the example agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from control_plane import ControlPlane, UnknownAgent
from tests.support.cp_harness import open_cp

SECRET = "sk-doctor-secret-value-0123456789"


def _acpctl(
    *args: str, config: Path | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    if config is not None:
        env["ACPCTL_CONFIG"] = str(config)
    return subprocess.run(
        [sys.executable, "-m", "control_plane.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd,
    )


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A configuration with an agent that dies at start after printing its configured
    key to stderr (so a leak of the value would show), and one that only adds env to a
    registry agent."""
    broken = tmp_path / "broken-agent.sh"
    broken.write_text(
        "#!/bin/sh\necho \"key is $BROKEN_API_KEY\" >&2\necho 'cannot start' >&2\nexit 3\n"
    )
    broken.chmod(0o755)
    path = tmp_path / "config.toml"
    path.write_text(
        f'db = "{tmp_path / "cp.db"}"\n'
        "[agents.broken]\n"
        f'command = "{broken}"\n'
        f'env = {{ BROKEN_API_KEY = "{SECRET}" }}\n'
        'passthrough = ["ACPCTL_TEST_UNSET_VARIABLE"]\n'
        "[agents.codex]\n"
        f'env = {{ OPENAI_API_KEY = "{SECRET}" }}\n'
    )
    return path


def test_list_names_every_agent_with_how_it_runs_here(config: Path) -> None:
    done = _acpctl("agents", "list", "--json", config=config)
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["example"]["runs"] == "installed"
    assert rows["broken"]["source"] == "config" and rows["codex"]["source"] == "config"
    assert set(rows["claude-acp"]["aliases"]) >= {"claude"}
    assert rows["claude-acp"]["runs"] in ("installed", "npx", "not installed")
    assert SECRET not in done.stdout
    table = _acpctl("agents", "list", config=config)
    assert table.returncode == 0 and "claude-acp" in table.stdout


def test_doctor_does_a_real_handshake_with_the_example_agent(config: Path) -> None:
    done = _acpctl("agents", "doctor", "example", "--json", config=config)
    assert done.returncode == 0, done.stderr
    (report,) = json.loads(done.stdout)
    assert report["usable"] is True and report["source"] == "bundled"
    shake = report["handshake"]
    assert shake["protocol_version"] == 1 and shake["agent_name"] == "example-agent"
    assert shake["load_session"] and shake["resume"] and shake["mcp_http"]
    assert 0 < shake["seconds"] < 60


def test_doctor_of_an_agent_that_cannot_start_exits_1_with_reason_and_no_secret(
    config: Path,
) -> None:
    done = _acpctl("agents", "doctor", "broken", "--json", config=config)
    assert done.returncode == 1, done.stderr
    (report,) = json.loads(done.stdout)
    assert report["usable"] is False
    assert "cannot start" in report["problem"]  # the agent's own stderr, quoted
    assert report["env"]["configured"] == ["BROKEN_API_KEY"]
    assert report["env"]["passthrough_unset"] == ["ACPCTL_TEST_UNSET_VARIABLE"]
    assert SECRET not in done.stdout + done.stderr  # its stderr was redacted
    assert "***" in report["problem"]
    text = _acpctl("agents", "doctor", "broken", config=config)
    assert text.returncode == 1 and "fix:" in text.stdout and SECRET not in text.stdout


def test_doctor_and_show_of_an_unknown_name_suggest_the_closest(config: Path) -> None:
    for args in (("agents", "doctor", "clade"), ("agents", "show", "clade")):
        done = _acpctl(*args, "--json", config=config)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert "did you mean claude" in done.stdout, done.stdout


def test_show_names_env_variables_never_their_values(config: Path) -> None:
    done = _acpctl("agents", "show", "codex", "--json", config=config)
    data = json.loads(done.stdout)
    assert data["env"]["configured"] == ["OPENAI_API_KEY"]
    assert data["registry_id"] == "codex-acp" and data["registry"]["distribution"]
    assert SECRET not in done.stdout + done.stderr


def test_batch_with_an_unknown_agent_name_is_a_usage_error_that_runs_nothing(
    tmp_path: Path, config: Path
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "a", "prompt": "hi"}) + "\n")
    done = _acpctl("batch", str(tasks), "--agent", "clade", config=config)
    assert done.returncode == 2, done.stderr
    assert "unknown agent 'clade'" in done.stderr and "claude" in done.stderr
    assert not (tmp_path / "cp.db").exists()
    # A task's own agent is checked the same way, before anything runs.
    tasks.write_text(json.dumps({"id": "a", "prompt": "hi", "agent": "gemni"}) + "\n")
    done = _acpctl("batch", str(tasks), config=config)
    assert done.returncode == 2 and "did you mean gemini" in done.stderr, done.stderr


def test_the_python_api_takes_names(tmp_path: Path) -> None:
    with open_cp(tmp_path) as cp:
        assert isinstance(cp, ControlPlane)
        spawned = cp.spawn("example", str(tmp_path), "hello")
        assert spawned.command is not None
        assert cp.wait(spawned.command.id, 60).state.value == "completed"
        with pytest.raises(UnknownAgent):
            cp.spawn("exampel", str(tmp_path), "hello")
