"""The ACP agent registry, as a snapshot shipped in the package (``registry.json``).

The registry (https://github.com/agentclientprotocol/registry) lists agents by id with how
each is distributed: an npm package run with ``npx``, a PyPI package run with ``uvx``, or a
per-platform binary archive. ACP clients resolve agents by these ids; so does ``--agent``.
The snapshot is read from the package, never fetched: nothing here touches the network.
Its source and date are in the file (``snapshot``); each entry keeps its registry commit.

Short names: ``claude``, ``codex`` (and ``gemini``, an id already) name the registry's
entries for Claude Code, Codex and Gemini CLI (``ALIASES``)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

# What people type for the three agents this project is tested with, beside the ids.
ALIASES: Mapping[str, str] = {
    "claude": "claude-acp",
    "claude-code": "claude-acp",
    "claude-code-acp": "claude-acp",  # the registry's id for it until 2026
    "codex": "codex-acp",
    "gemini-cli": "gemini",
}


@dataclass(frozen=True)
class Distribution:
    """One way an agent is distributed: ``npx`` / ``uvx`` (a package, optionally with a
    ``cmd`` among its executables) or ``binary`` (an archive per platform with its ``cmd``)."""

    kind: str  # "npx" | "uvx" | "binary"
    package: str | None = None  # npx/uvx: "name@version" as the registry pins it
    cmd: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    archive: str | None = None  # binary: this platform's archive URL

    @property
    def package_name(self) -> str | None:
        """The package without its version pin (``@scope/name@1.2`` -> ``@scope/name``)."""
        if self.package is None:
            return None
        at = self.package.rfind("@")
        return self.package if at <= 0 else self.package[:at]

    @property
    def pinned_version(self) -> str | None:
        if self.package is None:
            return None
        at = self.package.rfind("@")
        return None if at <= 0 else self.package[at + 1 :]


@dataclass(frozen=True)
class RegistryAgent:
    id: str
    name: str
    version: str
    description: str
    repository: str | None
    raw: Mapping[str, Any] = field(repr=False)

    def distributions(self, platform: str) -> list[Distribution]:
        """This agent's distributions usable on ``platform`` (``linux-x86_64``...), in the
        registry's order of preference here: packages, then the platform's binary."""
        found: list[Distribution] = []
        dist = self.raw.get("distribution", {})
        for kind in ("npx", "uvx"):
            spec = dist.get(kind)
            if spec:
                found.append(
                    Distribution(
                        kind,
                        package=spec["package"],
                        cmd=spec.get("cmd"),
                        args=tuple(spec.get("args", ())),
                        env=dict(spec.get("env", {})),
                    )
                )
        target = dist.get("binary", {}).get(platform)
        if target:
            found.append(
                Distribution(
                    "binary",
                    cmd=target["cmd"],
                    args=tuple(target.get("args", ())),
                    env=dict(target.get("env", {})),
                    archive=target.get("archive"),
                )
            )
        return found

    @property
    def platforms(self) -> tuple[str, ...]:
        return tuple(sorted(self.raw.get("distribution", {}).get("binary", {})))


@dataclass(frozen=True)
class Registry:
    source: str
    taken: str
    agents: Mapping[str, RegistryAgent]

    def get(self, name: str) -> RegistryAgent | None:
        """By registry id or short name (``ALIASES``)."""
        return self.agents.get(ALIASES.get(name, name))

    def names(self) -> list[str]:
        """Every name ``get`` answers: the ids and the short names."""
        return sorted({*self.agents, *ALIASES})

    def __iter__(self) -> Iterator[RegistryAgent]:
        return iter(self.agents[k] for k in sorted(self.agents))


def parse_registry(data: Mapping[str, Any]) -> Registry:
    snapshot = data.get("snapshot", {})
    agents = {
        entry["id"]: RegistryAgent(
            id=entry["id"],
            name=entry.get("name", entry["id"]),
            version=entry.get("version", ""),
            description=entry.get("description", ""),
            repository=entry.get("repository"),
            raw=entry,
        )
        for entry in data.get("agents", [])
    }
    return Registry(snapshot.get("source", ""), snapshot.get("taken", ""), agents)


@cache
def registry_env() -> dict[str, dict[str, str]]:
    """By every name an agent is known by (id and short names): the env its distribution
    for this platform sets, for the agents whose distribution sets any."""
    from control_plane.agents.install import this_platform

    found: dict[str, dict[str, str]] = {}
    names = {entry.id: [entry.id] for entry in snapshot()}
    for short, target in ALIASES.items():
        names.setdefault(target, []).append(short)
    for entry in snapshot():
        distributions = entry.distributions(this_platform())
        env = dict(distributions[0].env) if distributions else {}
        if env:
            for name in names[entry.id]:
                found[name] = env
    return found


@cache
def snapshot() -> Registry:
    """The registry shipped with this package."""
    text = resources.files("control_plane.agents").joinpath("registry.json").read_text("utf-8")
    return parse_registry(json.loads(text))
