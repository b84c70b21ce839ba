"""Which sessions-per-agent a batch runs with: the flag, else the configuration when it sets
it, else the batch default (docs/operations.md, "Shared agent processes")."""

from __future__ import annotations

from pathlib import Path

from control_plane.cli.batch import BATCH_SESSIONS_PER_AGENT, _sessions_per_agent
from control_plane.config import Config, load_config


def _config(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load_config(str(path), environ={})


def test_the_flag_wins(tmp_path: Path) -> None:
    config = _config(tmp_path, "[limits]\nsessions_per_agent = 2\n")
    assert _sessions_per_agent(5, config) == 5


def test_a_configured_value_wins_over_the_batch_default(tmp_path: Path) -> None:
    assert _sessions_per_agent(None, _config(tmp_path, "[limits]\nsessions_per_agent = 1\n")) == 1


def test_without_either_a_batch_shares(tmp_path: Path) -> None:
    config = _config(tmp_path, "")
    assert config.limits.sessions_per_agent == 1  # interactive sessions: a process each
    assert _sessions_per_agent(None, config) == BATCH_SESSIONS_PER_AGENT == 8


def test_an_agents_own_setting_overrides_the_process_wide_one(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        '[limits]\nsessions_per_agent = 2\n[agents.x]\ncommand = "x"\nsessions_per_process = 6\n',
    )
    settings = config.runtime_settings()
    assert settings.sessions_per_process("x") == 6
    assert settings.sessions_per_process("other") == 2
