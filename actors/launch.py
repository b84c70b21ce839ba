"""Building an ``AgentLaunch`` for a stored session."""

from __future__ import annotations

import os

from actors.settings import RuntimeSettings
from protocol.connection import AgentLaunch
from protocol.spawn import agent_environment
from store import SessionRecord


def launch_for(session: SessionRecord, settings: RuntimeSettings) -> AgentLaunch:
    os.makedirs(settings.log_dir, exist_ok=True)
    extra = session.metadata.get("additionalDirectories", [])
    return AgentLaunch(
        command=session.agent.command,
        cwd=session.cwd,
        env=agent_environment(dict(session.agent.env), settings.env_passthrough),
        stderr_path=os.path.join(settings.log_dir, f"{session.id}.stderr.log"),
        additional_directories=tuple(str(d) for d in extra),
        max_frame_bytes=settings.max_frame_bytes,
        shutdown_timeout_s=settings.agent_shutdown_timeout_s,
        terminals_enabled=settings.terminals_enabled,
    )
