"""What each launch of a named agent gets from the configuration current at that moment.

The store keeps an agent's name, command and the *names* of its environment variables, never
their values (see ``store.AgentSpec``). Each launch (first start, restart after a crash,
re-activation after passivation) looks the agent's name up here: so a rotated API key or a
changed endpoint in the configuration reaches the next launch of an existing session.

The registry is filled from the configuration when the control plane opens, and by the Python
API when a host spawns with an ``AgentSpec`` that carries values (kept in memory only, for this
process: after a restart the configuration, or the host spawning again, supplies them).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from protocol.agent.spawn import agent_environment
from store import AgentSpec


@dataclass(frozen=True)
class AgentProfile:
    """Per-agent launch options (``[agents.NAME]`` in the configuration)."""

    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    # Host variables forwarded by name (the value read from the host at launch).
    passthrough: tuple[str, ...] = ()
    # Advertise the client's fs/* to the agent (some agents cannot create files through it).
    fs: bool = True
    # Offer terminal/*; None follows the process-wide setting.
    terminals: bool | None = None
    # Sessions one process of this agent may hold; None follows the process-wide setting.
    sessions_per_process: int | None = None


class AgentProfiles:
    """A thread-safe map from agent name to ``AgentProfile``; unknown names get defaults."""

    def __init__(self, profiles: Mapping[str, AgentProfile] | None = None) -> None:
        self._lock = threading.Lock()
        self._profiles: dict[str, AgentProfile] = dict(profiles or {})

    def get(self, name: str) -> AgentProfile:
        with self._lock:
            return self._profiles.get(name) or AgentProfile()

    def remember(self, spec: AgentSpec) -> None:
        """Values a host handed in with a spec win over the configured ones of that name."""
        if not spec.env:
            return
        with self._lock:
            current = self._profiles.get(spec.name) or AgentProfile()
            env = {**current.env, **dict(spec.env)}
            self._profiles[spec.name] = replace(current, env=MappingProxyType(env))

    def environment(self, name: str, passthrough: Iterable[str] = ()) -> dict[str, str]:
        """The environment a launch of agent ``name`` gets now: the host's allowlist, the
        ``passthrough`` names (process-wide and the agent's), its configured values."""
        profile = self.get(name)
        return agent_environment(dict(profile.env), (*passthrough, *profile.passthrough))

    def secret_values(self, name: str, passthrough: Iterable[str] = ()) -> tuple[str, ...]:
        """The values a launch of agent ``name`` must never see stored or logged: its
        configured env values and the host's values of the variables it passes through."""
        profile = self.get(name)
        environment = self.environment(name, passthrough)
        names = {*profile.env, *profile.passthrough, *passthrough}
        return tuple(sorted({environment[n] for n in names if environment.get(n)}))

    def missing(self, spec: AgentSpec) -> list[str]:
        """Names a stored spec was configured with that no current source supplies."""
        profile = self.get(spec.name)
        return [n for n in spec.env_names if n not in profile.env and n not in profile.passthrough]
