"""The example agent's command line: its behaviour switches and where it keeps its state."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Options:
    """Command-line behaviour switches (see :func:`parse_args`)."""

    state_file: Path
    invocations_file: Path | None = None
    # A line with this process's pid is appended here on every initialize (processes started).
    starts_file: Path | None = None
    exit_during_initialize: bool = False
    # Refuse session/new with -32000 "Authentication required" unless EXAMPLE_AGENT_TOKEN
    # is set (what an agent without a configured API key does).
    auth_required: bool = False
    load: bool = True
    resume: bool = True
    fork: bool = False  # advertise and serve session/fork (a copy of a stored session)
    chunk_delay_ms: int = 0
    # Answer session/load first and stream the replay after it, as Gemini CLI 0.61.0 does
    # (its loadSession starts streamHistory without awaiting it). ACP asks for the opposite.
    replay_after_answer: bool = False
    # Advertise mcpCapabilities.http and call HTTP MCP servers (as Claude Code, Codex and
    # Gemini CLI do); --no-http-mcp leaves the agent with stdio MCP servers only.
    http_mcp: bool = True
    # Send the slash commands after session/new, load and resume, as real agents do (off: a
    # test that needs no update it did not ask for, which could be recorded under a prompt).
    slash_commands: bool = True


def default_state_file() -> Path:
    """Where the agent keeps its sessions when no ``--state-file`` is given: the user's state
    directory, never the caller's cwd (an agent started in a project must not leave files
    in it)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "acpctl" / "example-agent-sessions.json"


def parse_args(argv: list[str] | None = None) -> Options:
    """Parse command-line flags; env vars supply the file defaults."""
    p = argparse.ArgumentParser(prog="python -m protocol.example_agent", description=__doc__)
    p.add_argument("--state-file", type=Path, default=None)
    p.add_argument("--invocations-file", type=Path, default=None)
    p.add_argument("--starts-file", type=Path, default=None)
    p.add_argument("--exit-during-initialize", action="store_true")
    p.add_argument("--auth-required", action="store_true")
    p.add_argument("--no-load", action="store_true")
    p.add_argument("--no-resume", action="store_true")
    p.add_argument("--fork", action="store_true", help="advertise and serve session/fork")
    p.add_argument("--chunk-delay-ms", type=int, default=0)
    p.add_argument("--replay-after-answer", action="store_true")
    p.add_argument("--no-http-mcp", action="store_true")
    p.add_argument("--no-slash-commands", action="store_true")
    a = p.parse_args(argv)
    state = a.state_file or Path(os.environ.get("EXAMPLE_AGENT_STATE") or default_state_file())
    invocations = a.invocations_file or os.environ.get("EXAMPLE_AGENT_INVOCATIONS") or None
    return Options(
        state_file=Path(state),
        invocations_file=Path(invocations) if invocations else None,
        starts_file=a.starts_file,
        exit_during_initialize=a.exit_during_initialize,
        auth_required=a.auth_required,
        load=not a.no_load,
        resume=not a.no_resume,
        fork=a.fork,
        chunk_delay_ms=a.chunk_delay_ms,
        replay_after_answer=a.replay_after_answer,
        http_mcp=not a.no_http_mcp,
        slash_commands=not a.no_slash_commands,
    )
