"""Fixtures for tests that drive the real coding agents against the stand-in model server."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .agents import AGENT_NAMES, AgentLaunch, launch, skip_reason
from .model_server import ModelServer


@dataclass
class RealAgent:
    """One real agent, configured for one test: its own HOME and session cwd."""

    name: str
    launch: AgentLaunch
    home: Path
    cwd: Path
    server: ModelServer

    def relaunch(self, api_key: str | None = "same") -> AgentLaunch:
        """A fresh ``AgentLaunch`` with the same HOME (e.g. for session/load in a new process)."""
        if api_key == "same":
            return launch(self.name, self.server.base_url, self.home)
        return launch(self.name, self.server.base_url, self.home, api_key=api_key)


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    with ModelServer() as server:
        yield server


@pytest.fixture(params=AGENT_NAMES)
def real_agent(request: pytest.FixtureRequest, model_server: ModelServer, tmp_path: Path):
    name = request.param
    reason = skip_reason(name)
    if reason:
        pytest.skip(reason)
    home = tmp_path / "home"
    cwd = tmp_path / "work"
    home.mkdir()
    cwd.mkdir()
    return RealAgent(name, launch(name, model_server.base_url, home), home, cwd, model_server)
