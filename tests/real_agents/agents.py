"""How to launch the three real ACP coding agents against the stand-in model server.

Each ``*_launch(base_url, home)`` writes whatever config the agent needs under ``home`` (a
temporary HOME / state directory owned by the test) and returns an :class:`AgentLaunch` with the
``argv`` and the minimal ``env`` for an ACP stdio process.  ``launch(name, base_url, home)``
dispatches by name (``"claude"``, ``"codex"``, ``"gemini"``).

Install the agents with ``npm ci --prefix tests/real_agents`` (Node.js >= 20).  ``available()``
and ``skip_reason()`` tell tests whether they can run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

__all__ = [
    "AGENT_NAMES",
    "API_KEY",
    "HERE",
    "NODE_MODULES",
    "AgentLaunch",
    "available",
    "claude_launch",
    "codex_launch",
    "gemini_launch",
    "launch",
    "node_path",
    "skip_reason",
]

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE / "node_modules"
BIN = NODE_MODULES / ".bin"
API_KEY = "sk-stand-in-test-key"
AGENT_NAMES = ("claude", "codex", "gemini")
INSTALL_HINT = "Node.js >= 20 and `npm ci --prefix tests/real_agents`"

# What must exist after `npm ci` for each agent.
_REQUIRED: dict[str, list[Path]] = {
    "claude": [
        NODE_MODULES / "@zed-industries/claude-agent-acp/dist/index.js",
        NODE_MODULES / "@anthropic-ai/claude-agent-sdk/cli.js",
    ],
    "codex": [NODE_MODULES / "@zed-industries/codex-acp-linux-x64/bin/codex-acp"],
    "gemini": [NODE_MODULES / "@google/gemini-cli/bundle/gemini.js"],
}


@dataclass
class AgentLaunch:
    """Everything needed to start one agent as an ACP stdio subprocess."""

    name: str
    argv: list[str]
    env: dict[str, str]
    home: Path
    files: dict[str, Path] = field(default_factory=dict)  # config files written

    @property
    def command(self) -> str:
        return self.argv[0]

    @property
    def args(self) -> list[str]:
        return self.argv[1:]


@cache
def node_path() -> str | None:
    """Absolute path of a Node.js >= 20 binary, or None."""
    node = shutil.which("node")
    if not node:
        return None
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=10)
        major = int(out.stdout.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return node if major >= 20 else None


def skip_reason(name: str | None = None) -> str | None:
    """Why agent ``name`` (or any agent when None) cannot run here, or None when it can.
    With ``ACPCTL_REAL_AGENTS=required`` (CI sets it) a missing install is an error, not a
    skip: the real-agent suite must never go quietly unrun there."""
    reason = _missing(name)
    if reason is not None and os.environ.get("ACPCTL_REAL_AGENTS") == "required":
        raise RuntimeError(f"ACPCTL_REAL_AGENTS=required, but {reason}")
    return reason


def _missing(name: str | None) -> str | None:
    if node_path() is None:
        return f"real ACP agents need {INSTALL_HINT} (no Node.js >= 20 on PATH)"
    names = [name] if name else list(AGENT_NAMES)
    for n in names:
        for p in _REQUIRED[n]:
            if not p.exists():
                rel = p.relative_to(HERE)
                return f"real ACP agent {n!r} needs {INSTALL_HINT} (missing {rel})"
    return None


def available(name: str | None = None) -> bool:
    return skip_reason(name) is None


def _base_env(home: Path) -> dict[str, str]:
    """The environment every agent gets: no inherited secrets, sandbox flags or proxies."""
    node = node_path()
    node_dir = str(Path(node).parent) if node else ""
    path = os.pathsep.join(p for p in (node_dir, "/usr/local/bin", "/usr/bin", "/bin") if p)
    return {
        "PATH": path,
        "HOME": str(home),
        "USER": "root" if os.geteuid() == 0 else os.environ.get("USER", "user"),
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "TMPDIR": str(_mk(home / "tmp")),
        "XDG_CONFIG_HOME": str(_mk(home / ".config")),
        "XDG_CACHE_HOME": str(_mk(home / ".cache")),
        "XDG_DATA_HOME": str(_mk(home / ".local/share")),
        "XDG_STATE_HOME": str(_mk(home / ".local/state")),
        "NO_COLOR": "1",
        "CI": "1",
        "DO_NOT_TRACK": "1",
        "NO_UPDATE_NOTIFIER": "1",
        "npm_config_update_notifier": "false",
    }


def _guard_env(base_url: str) -> dict[str, str]:
    """Route any non-loopback HTTP(S) attempt to the stand-in server, which refuses it."""
    return {
        "HTTPS_PROXY": base_url,
        "HTTP_PROXY": base_url,
        "https_proxy": base_url,
        "http_proxy": base_url,
        "NO_PROXY": "127.0.0.1,localhost,::1",
        "no_proxy": "127.0.0.1,localhost,::1",
    }


def _mk(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def claude_launch(base_url: str, home: Path, api_key: str | None = API_KEY) -> AgentLaunch:
    """Claude Code through ``claude-agent-acp`` (never pass IS_SANDBOX: as root it would make
    the adapter ask for skip-permissions, which Claude Code refuses)."""
    home = Path(home)
    _mk(home)
    env = _base_env(home)
    env.update(_guard_env(base_url))
    env.update(
        {
            "ANTHROPIC_BASE_URL": base_url,
            "CLAUDE_CONFIG_DIR": str(_mk(home / ".claude")),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_BUG_COMMAND": "1",
            "CLAUDE_CODE_ENABLE_TELEMETRY": "0",
            "ANTHROPIC_MODEL": "claude-sonnet-4-5",
            "ANTHROPIC_SMALL_FAST_MODEL": "claude-haiku-4-5",
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": "claude-haiku-4-5",
        }
    )
    if api_key is not None:
        env["ANTHROPIC_API_KEY"] = api_key
    # Pre-approve the key so Claude Code never asks the (non-existent) user about it.
    config = home / ".claude" / ".claude.json"
    suffix = (api_key or "")[-20:]
    config.write_text(
        json.dumps(
            {
                "hasCompletedOnboarding": True,
                "customApiKeyResponses": {"approved": [suffix] if suffix else [], "rejected": []},
                "autoUpdates": False,
            }
        )
    )
    argv = [
        node_path() or "node",
        str(NODE_MODULES / "@zed-industries/claude-agent-acp/dist/index.js"),
    ]
    return AgentLaunch("claude", argv, env, home, {"claude.json": config})


def codex_launch(base_url: str, home: Path, api_key: str | None = API_KEY) -> AgentLaunch:
    """Codex through ``codex-acp`` with a ``CODEX_HOME/config.toml`` pointing at the server."""
    home = Path(home)
    codex_home = _mk(home / ".codex")
    env = _base_env(home)
    env.update(_guard_env(base_url))
    env.update({"CODEX_HOME": str(codex_home), "RUST_LOG": "warn"})
    if api_key is not None:
        env["STANDIN_API_KEY"] = api_key
    config = codex_home / "config.toml"
    config.write_text(
        "\n".join(
            [
                'model = "gpt-5.4"',
                'model_provider = "standin"',
                'approval_policy = "untrusted"',
                'sandbox_mode = "danger-full-access"',
                "check_for_update_on_startup = false",
                "",
                "[analytics]",
                "enabled = false",
                "",
                "[feedback]",
                "enabled = false",
                "",
                "[model_providers.standin]",
                'name = "stand-in"',
                f'base_url = "{base_url}/v1"',
                'env_key = "STANDIN_API_KEY"',
                'wire_api = "responses"',
                "request_max_retries = 0",
                "stream_max_retries = 0",
                "",
            ]
        )
    )
    argv = [str(NODE_MODULES / "@zed-industries/codex-acp-linux-x64/bin/codex-acp")]
    return AgentLaunch("codex", argv, env, home, {"config.toml": config})


def gemini_launch(base_url: str, home: Path, api_key: str | None = API_KEY) -> AgentLaunch:
    """Gemini CLI in ACP mode (``gemini --experimental-acp``) with ``~/.gemini/settings.json``."""
    home = Path(home)
    gemini_dir = _mk(home / ".gemini")
    env = _base_env(home)
    env.update(_guard_env(base_url))
    env.update(
        {
            "GOOGLE_GEMINI_BASE_URL": base_url,
            "GEMINI_CLI_NO_RELAUNCH": "true",
            "GEMINI_TELEMETRY_ENABLED": "false",
        }
    )
    if api_key is not None:
        env["GEMINI_API_KEY"] = api_key
    settings = gemini_dir / "settings.json"
    settings.write_text(
        json.dumps(
            {
                "security": {
                    "folderTrust": {"enabled": False},
                    "auth": {"selectedType": "gemini-api-key"},
                },
                "telemetry": {"enabled": False},
                "privacy": {"usageStatisticsEnabled": False},
                "general": {
                    "disableAutoUpdate": True,
                    "disableUpdateNag": True,
                    "enableAutoUpdate": False,
                    "enableAutoUpdateNotification": False,
                },
                "model": {"name": "gemini-2.5-flash"},
            },
            indent=2,
        )
    )
    argv = [
        node_path() or "node",
        str(NODE_MODULES / "@google/gemini-cli/bundle/gemini.js"),
        "--experimental-acp",
    ]
    return AgentLaunch("gemini", argv, env, home, {"settings.json": settings})


_LAUNCHERS: dict[str, Callable[..., AgentLaunch]] = {
    "claude": claude_launch,
    "codex": codex_launch,
    "gemini": gemini_launch,
}


def launch(name: str, base_url: str, home: Path, api_key: str | None = API_KEY) -> AgentLaunch:
    """``AgentLaunch`` for agent ``name`` (one of ``AGENT_NAMES``)."""
    return _LAUNCHERS[name](base_url, Path(home), api_key=api_key)
