"""What ``--agent TEXT`` (and a task's ``"agent"``, ``spawn(agent=...)``) names, in order:

1. ``[agents.TEXT]`` in the configuration: its ``command``; one without a command takes the
   registry's for TEXT (the section then only adds env, passthrough, cwd...);
2. ``example``: the bundled example agent;
3. a registry id or short name (``claude``, ``codex``, ``gemini``...: ``registry.py``), run
   the way ``install.py`` finds on this machine;
4. a literal command line (``"npx @zed-industries/claude-agent-acp"``, a path, a program
   on PATH).

A single word that is none of these is an ``UnknownAgent`` listing the closest names, not
a command that fails later with "No such file"."""

from __future__ import annotations

import difflib
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from control_plane.agents.command import EXAMPLE_AGENT, AgentCommandError, agent_from_command
from control_plane.agents.install import Located, NotLocated, locate
from control_plane.agents.registry import RegistryAgent, snapshot
from state_machines import ControlPlaneError
from store import AgentSpec

if TYPE_CHECKING:
    from control_plane.config_sections import AgentConfig

EXAMPLE_NAMES = ("example", "example-agent")


class UnknownAgent(AgentCommandError):
    """A name that is no configured agent, registry agent or program on PATH."""

    def __init__(self, name: str, closest: list[str]) -> None:
        hint = f"; did you mean {', '.join(closest)}?" if closest else ""
        super().__init__(
            f"unknown agent {name!r}{hint} (`acpctl agents list` shows every name; a command "
            "line with arguments or a path is run as given)"
        )
        self.name = name
        self.closest = closest


class AgentNotInstalled(ControlPlaneError):
    """A registry agent that nothing on this machine can run: the reason and the fix."""

    def __init__(self, name: str, reason: str, fix: str) -> None:
        super().__init__(f"agent {name!r} cannot run here: {reason}; fix: {fix}")
        self.name, self.reason, self.fix = name, reason, fix


@dataclass(frozen=True)
class ResolvedAgent:
    spec: AgentSpec
    cwd: str | None  # the configured working directory, if any
    source: str  # "config" | "bundled" | "registry" | "command"
    registry: RegistryAgent | None = None
    located: Located | None = None


def resolve_agent(
    text: str | list[str] | tuple[str, ...] | None,
    configured: Mapping[str, AgentConfig] | None = None,
    cwd: str | None = None,
) -> ResolvedAgent:
    """``text`` resolved as the module docstring says (``None``: the example agent)."""
    configured = configured or {}
    if text is None:
        return ResolvedAgent(EXAMPLE_AGENT, None, "bundled")
    if not isinstance(text, str):
        return ResolvedAgent(agent_from_command(text), None, "command")
    name = text.strip()
    section = configured.get(name)
    if section is not None:
        return _from_config(name, section, cwd)
    if name in EXAMPLE_NAMES:
        return ResolvedAgent(EXAMPLE_AGENT, None, "bundled")
    entry = snapshot().get(name)
    if entry is not None:
        return _from_registry(name, entry, {}, None, cwd)
    if _is_single_word(name) and not _runnable(name):
        raise UnknownAgent(name, closest_names(name, configured))
    return ResolvedAgent(agent_from_command(text), None, "command")


def _from_config(name: str, section: AgentConfig, cwd: str | None) -> ResolvedAgent:
    agent_cwd = None if section.cwd is None else os.path.expanduser(section.cwd)
    env = dict(section.env)
    if section.command is not None:
        spec = agent_from_command(section.command, name=name)
        return ResolvedAgent(_with_env(spec, env), agent_cwd, "config")
    entry = snapshot().get(name)
    if entry is None:
        raise AgentCommandError(
            f"[agents.{name}] has no command and {name!r} is not a registry agent: give it "
            "a command"
        )
    return _from_registry(name, entry, env, agent_cwd, cwd)


def _from_registry(
    name: str,
    entry: RegistryAgent,
    env: dict[str, str],
    agent_cwd: str | None,
    cwd: str | None,
) -> ResolvedAgent:
    found = locate(entry, cwd=agent_cwd or cwd)
    if isinstance(found, NotLocated):
        raise AgentNotInstalled(name, found.reason, found.fix)
    spec = AgentSpec(name=name, command=found.argv)
    # The registry's env first: what the configuration sets for the agent wins.
    return ResolvedAgent(
        _with_env(spec, {**found.distribution.env, **env}),
        agent_cwd,
        "registry",
        entry,
        found,
    )


def _with_env(spec: AgentSpec, env: dict[str, str]) -> AgentSpec:
    if not env:
        return spec
    return AgentSpec(spec.name, spec.command, env=tuple(sorted(env.items())))


def _is_single_word(text: str) -> bool:
    return bool(text) and not any(ch.isspace() for ch in text) and "/" not in text


def _runnable(word: str) -> bool:
    return shutil.which(word) is not None


def known_names(configured: Mapping[str, object] | None = None) -> list[str]:
    """Every name ``resolve_agent`` takes without a command line."""
    return sorted({*(configured or {}), *EXAMPLE_NAMES, *snapshot().names()})


def closest_names(name: str, configured: Mapping[str, object] | None = None) -> list[str]:
    names = known_names(configured)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    # A prefix ("clau") or a part ("copilot" of "github-copilot") is close too.
    close += [n for n in names if (n.startswith(name) or name in n.split("-")) and n not in close]
    return close[:5]
