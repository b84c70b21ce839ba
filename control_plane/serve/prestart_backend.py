"""``acpctl serve`` starts its backend agent before anything else is loaded."""

from __future__ import annotations

import os

from control_plane.config import Config
from control_plane.prestart import prestart_agent
from protocol.agent.prestart import PrestartPool
from store import AgentSpec


def prestart_backend(config: Config, spec: AgentSpec) -> PrestartPool:
    """The backend agent spawned in serve's cwd (control_plane/prestart.py)."""
    return prestart_agent(config, spec, os.getcwd(), "serve")
