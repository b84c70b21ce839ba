"""Turning a command line (``--agent "npx @zed-industries/claude-agent-acp"``) into an
``AgentSpec``: the last step of resolution (``resolve.py``), for what is neither a
configured agent nor a registry name."""

from __future__ import annotations

import os
import shlex
import sys

from state_machines import ControlPlaneError
from store import AgentSpec

EXAMPLE_AGENT = AgentSpec(
    name="example-agent", command=(sys.executable, "-m", "protocol.example_agent")
)


class AgentCommandError(ControlPlaneError, ValueError):
    """An agent command line that cannot be run: empty, or with unbalanced quotes."""


def agent_from_command(
    command: str | list[str] | tuple[str, ...], name: str | None = None
) -> AgentSpec:
    """Parse a command line; the name defaults to the program (or module) it runs.
    ``AgentCommandError`` for an empty command or one ``shlex`` cannot split."""
    try:
        argv = tuple(shlex.split(command) if isinstance(command, str) else command)
    except ValueError as exc:  # "No closing quotation" and the like
        raise AgentCommandError(f"agent command {command!r}: {exc}") from None
    if not argv or not argv[0].strip():
        raise AgentCommandError("an agent command must not be empty")
    return AgentSpec(name=name or _default_name(argv), command=argv)


def _default_name(argv: tuple[str, ...]) -> str:
    if "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1].rsplit(".", 1)[-1].replace("_", "-")
    for arg in argv:
        base = os.path.basename(arg)
        if base in {"npx", "uvx", "node", "bunx", "pnpm", "python", "python3"} or arg.startswith(
            "-"
        ):
            continue
        return base.rsplit("/", 1)[-1]
    return os.path.basename(argv[0])
