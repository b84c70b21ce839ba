"""Agents by name (control_plane/agents): the order a name resolves in, how a registry
agent is found on this machine (real files: a node_modules tree, executables on PATH), and
the typed errors for a name that is nothing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from control_plane.agents import (
    EXAMPLE_AGENT,
    AgentCommandError,
    AgentNotInstalled,
    UnknownAgent,
    resolve_agent,
)
from control_plane.agents.install import NotLocated, locate
from control_plane.agents.registry import ALIASES, Distribution, parse_registry, snapshot
from control_plane.config_sections import AgentConfig


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _npm_package(root: Path, package: str, bins: dict[str, str], version: str) -> Path:
    """A package as npm installs it: its files, its package.json, its .bin links."""
    pkg = root / "node_modules" / package
    for name, file in bins.items():
        _executable(pkg / file)
        link = root / "node_modules" / ".bin" / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(pkg / file, link.parent))
    (pkg / "package.json").write_text(
        json.dumps({"name": package, "version": version, "bin": bins})
    )
    return pkg


@pytest.fixture
def bare_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH with nothing but an empty directory (no node, npx, uvx, agents)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("NPM_CONFIG_PREFIX", raising=False)
    monkeypatch.chdir(tmp_path)
    return empty


def test_the_snapshot_records_its_source_and_date_and_has_the_three_agents() -> None:
    registry = snapshot()
    assert registry.source == "https://github.com/agentclientprotocol/registry"
    assert registry.taken == "2026-12-07"
    for short in ("claude", "codex", "gemini"):
        entry = registry.get(short)
        assert entry is not None, short
        assert entry.distributions("linux-x86_64"), short
    assert {ALIASES["claude"], ALIASES["codex"]} <= set(registry.agents)
    assert all(target in registry.agents for target in ALIASES.values())


def test_a_package_pin_splits_into_name_and_version() -> None:
    dist = Distribution("npx", package="@scope/agent-acp@1.2.3")
    assert (dist.package_name, dist.pinned_version) == ("@scope/agent-acp", "1.2.3")
    plain = Distribution("npx", package="agent")
    assert (plain.package_name, plain.pinned_version) == ("agent", None)


def test_a_registry_name_runs_the_installed_package_found_in_node_modules(
    tmp_path: Path, bare_path: Path
) -> None:
    project = tmp_path / "project"
    entry = snapshot().get("gemini")
    assert entry is not None
    package = entry.distributions("linux-x86_64")[0].package_name
    assert package is not None
    _npm_package(project, package, {"gemini": "bundle/gemini.js"}, "9.9.9")
    resolved = resolve_agent("gemini", cwd=str(project / "src"))  # found from a subdirectory
    assert resolved.source == "registry" and resolved.located is not None
    assert resolved.located.how == "installed" and resolved.located.version == "9.9.9"
    assert resolved.spec.command[0] == str(project / "node_modules" / ".bin" / "gemini")
    assert list(resolved.spec.command[1:]) == list(entry.distributions("linux-x86_64")[0].args)
    assert resolved.spec.name == "gemini"


def test_an_executable_of_the_package_name_on_path_is_used(tmp_path: Path, bare_path: Path) -> None:
    # Another scope's build of the adapter (registries move packages between owners),
    # installed as node_modules/.bin on PATH: found by its executable's name.
    other = tmp_path / "elsewhere"
    _npm_package(
        other, "@zed-industries/claude-agent-acp", {"claude-agent-acp": "dist/i.js"}, "0.1.0"
    )
    os.environ["PATH"] = f"{other / 'node_modules' / '.bin'}{os.pathsep}{bare_path}"
    resolved = resolve_agent("claude")
    assert resolved.located is not None and resolved.located.how == "installed"
    assert Path(resolved.spec.command[0]).name == "claude-agent-acp"
    assert resolved.located.version == "0.1.0"


def test_not_installed_falls_back_to_npx_when_npx_is_on_path(bare_path: Path) -> None:
    _executable(bare_path / "npx")
    entry = snapshot().get("claude")
    assert entry is not None
    resolved = resolve_agent("claude")
    package = entry.distributions("linux-x86_64")[0].package
    assert resolved.located is not None and resolved.located.how == "npx"
    assert resolved.located.needs_network
    assert resolved.spec.command[:3] == ("npx", "--yes", package)


def test_nothing_to_run_it_with_is_a_typed_error_with_the_fix(bare_path: Path) -> None:
    with pytest.raises(AgentNotInstalled) as caught:
        resolve_agent("claude")
    assert "npm install -g" in caught.value.fix
    binary_only = next(
        e for e in snapshot() if {d.kind for d in e.distributions("linux-x86_64")} == {"binary"}
    )
    with pytest.raises(AgentNotInstalled) as caught:
        resolve_agent(binary_only.id)
    assert "download https://" in caught.value.fix and "PATH" in caught.value.fix


def test_the_configuration_wins_then_example_then_registry_then_a_command(
    tmp_path: Path, bare_path: Path
) -> None:
    configured = {
        "claude": AgentConfig(command="my-claude --flag", env={"ANTHROPIC_API_KEY": "k"}),
        "mine": AgentConfig(command=["python3", "-m", "mine"], cwd="~/src"),
    }
    claude = resolve_agent("claude", configured)
    assert claude.source == "config" and claude.spec.command == ("my-claude", "--flag")
    assert claude.spec.env_names == ("ANTHROPIC_API_KEY",)
    mine = resolve_agent("mine", configured)
    assert mine.cwd == os.path.expanduser("~/src") and mine.spec.name == "mine"
    assert resolve_agent("example").spec == EXAMPLE_AGENT
    assert resolve_agent(None).spec == EXAMPLE_AGENT
    literal = resolve_agent("python3 -m some_agent --acp")
    assert literal.source == "command" and literal.spec.command[-1] == "--acp"
    assert resolve_agent(["/opt/agent", "--x"]).spec.command == ("/opt/agent", "--x")
    assert resolve_agent("./relative/agent").source == "command"  # a path: run as given


def test_a_section_without_a_command_adds_env_to_the_registry_agent(bare_path: Path) -> None:
    _executable(bare_path / "codex-acp")
    configured = {"codex": AgentConfig(env={"OPENAI_API_KEY": "sk-x"}, passthrough=["HOME"])}
    resolved = resolve_agent("codex", configured)
    assert resolved.source == "registry"
    assert resolved.spec.command[0] == str(bare_path / "codex-acp")
    assert resolved.spec.env_names == ("OPENAI_API_KEY",)
    with pytest.raises(AgentCommandError, match="has no command"):
        resolve_agent("nothing-like-it", {"nothing-like-it": AgentConfig()})


def test_an_unknown_word_lists_the_closest_names(bare_path: Path) -> None:
    with pytest.raises(UnknownAgent) as caught:
        resolve_agent("clade")
    assert "claude" in caught.value.closest
    assert "did you mean" in str(caught.value) and "acpctl agents list" in str(caught.value)
    with pytest.raises(UnknownAgent) as caught:
        resolve_agent("copilot")
    assert any("copilot" in n for n in caught.value.closest)
    # A word that is a program on PATH is a command, not an unknown name.
    _executable(bare_path / "my-own-agent")
    assert resolve_agent("my-own-agent").source == "command"
    with pytest.raises(UnknownAgent) as caught:
        resolve_agent("xyzzy-nothing")
    assert caught.value.closest == []


def test_registry_parsing_keeps_binary_targets_per_platform() -> None:
    registry = parse_registry(
        {
            "snapshot": {"source": "s", "taken": "t"},
            "agents": [
                {
                    "id": "bin-only",
                    "name": "Bin",
                    "version": "1.0.0",
                    "description": "d",
                    "distribution": {
                        "binary": {
                            "linux-x86_64": {
                                "archive": "https://x/a.tgz",
                                "cmd": "./a",
                                "args": ["acp"],
                            }
                        }
                    },
                }
            ],
        }
    )
    entry = registry.get("bin-only")
    assert entry is not None
    (dist,) = entry.distributions("linux-x86_64")
    assert (dist.kind, dist.cmd, dist.args, dist.archive) == (
        "binary",
        "./a",
        ("acp",),
        "https://x/a.tgz",
    )
    assert entry.distributions("darwin-aarch64") == []
    found = locate(entry, path="")  # nothing on PATH: the archive to download is the fix
    assert isinstance(found, NotLocated) and "https://x/a.tgz" in found.fix
