"""Building an ``AgentLaunch`` for a stored session."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from actors.settings import RuntimeSettings
from protocol.agent.types import AgentLaunch
from store import AgentSpec, SessionRecord

log = logging.getLogger(__name__)


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
    """The environment comes from the agent's profile as configured now, never from the
    store: the stored spec names its variables only."""
    os.makedirs(settings.log_dir, exist_ok=True)
    profile = settings.agent_profiles.get(agent.name)
    missing = settings.agent_profiles.missing(agent)
    if missing:
        log.warning(
            "agent %r was configured with %s, which the current configuration does not set",
            agent.name,
            ", ".join(missing),
        )
    terminals = settings.terminals_enabled if profile.terminals is None else profile.terminals
    return AgentLaunch(
        command=agent.command,
        cwd=cwd,
        env=settings.agent_profiles.environment(agent.name, settings.env_passthrough),
        stderr_path=os.path.join(settings.log_dir, f"{log_name}.stderr.log"),
        additional_directories=tuple(str(d) for d in additional_directories),
        max_frame_bytes=settings.max_frame_bytes,
        read_coalesce_s=settings.read_coalesce_s,
        shutdown_timeout_s=settings.agent_shutdown_timeout_s,
        terminals_enabled=terminals,
        fs=profile.fs,
        fs_limits=settings.fs_limits,
        stderr_max_bytes=settings.agent_log_max_bytes,
        secret_values=settings.agent_profiles.secret_values(agent.name, settings.env_passthrough),
        nice=settings.agent_nice,
    )
