"""Building an ``AgentLaunch`` for a stored session."""

from __future__ import annotations

import os
from collections.abc import Sequence

from actors.settings import RuntimeSettings
from protocol.connection import AgentLaunch
from protocol.spawn import agent_environment
from store import AgentSpec, SessionRecord


def launch_for(session: SessionRecord, settings: RuntimeSettings) -> AgentLaunch:
    extra = session.metadata.get("additionalDirectories", [])
    return launch_agent(session.agent, session.cwd, session.id, settings, extra)


def launch_agent(
    agent: AgentSpec,
    cwd: str,
    log_name: str,
    settings: RuntimeSettings,
    additional_directories: Sequence[str] = (),
) -> AgentLaunch:
    os.makedirs(settings.log_dir, exist_ok=True)
    return AgentLaunch(
        command=agent.command,
        cwd=cwd,
        env=agent_environment(dict(agent.env), settings.env_passthrough),
        stderr_path=os.path.join(settings.log_dir, f"{log_name}.stderr.log"),
        additional_directories=tuple(str(d) for d in additional_directories),
        max_frame_bytes=settings.max_frame_bytes,
        shutdown_timeout_s=settings.agent_shutdown_timeout_s,
        terminals_enabled=settings.terminals_enabled,
    )
