"""Agents by name: the configuration, the bundled example, the ACP registry's snapshot,
or a command line (``resolve.py`` says in which order), and what ``acpctl agents``
reports about each (``doctor.py``)."""

from control_plane.agents.command import EXAMPLE_AGENT, AgentCommandError, agent_from_command
from control_plane.agents.resolve import (
    AgentNotInstalled,
    ResolvedAgent,
    UnknownAgent,
    closest_names,
    known_names,
    resolve_agent,
)

__all__ = [
    "EXAMPLE_AGENT",
    "AgentCommandError",
    "AgentNotInstalled",
    "ResolvedAgent",
    "UnknownAgent",
    "agent_from_command",
    "closest_names",
    "known_names",
    "resolve_agent",
]
