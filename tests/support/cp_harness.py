"""A ControlPlane on a real store running the bundled example agent as real subprocesses."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from actors.settings import RuntimeSettings
from control_plane import ControlPlane
from protocol.agent.permissions import Decision, PermissionPolicy
from protocol.example_agent import noop
from state_machines.event_kinds import EventKind
from store import AgentSpec, EventRecord

FAST = RuntimeSettings(
    permission_policy=PermissionPolicy(Decision.ALLOW),
    turn_timeout_s=60,
    cancel_grace_s=2,
    sweep_interval_s=0.2,
    discover_interval_s=0.5,
    agent_shutdown_timeout_s=1.0,
)


def example_agent(tmp: Path, *flags: str) -> AgentSpec:
    return AgentSpec(
        "example-agent",
        (
            sys.executable,
            "-m",
            "protocol.example_agent",
            "--state-file",
            str(tmp / "agent-state.json"),
            "--invocations-file",
            str(tmp / "invocations.jsonl"),
            *flags,
        ),
    )


def noop_agent() -> AgentSpec:
    """For tests that only need turns to run (echo, ``#hang`` until cancelled): starts in a
    tenth of the example agent's CPU time (protocol/example_agent/noop.py)."""
    return AgentSpec("noop-agent", noop.command())


def open_cp(tmp: Path, db: str | None = None, **overrides: Any) -> ControlPlane:
    """A control plane on ``db`` (the ``db`` fixture: either backend), or on a SQLite file
    in ``tmp``."""
    settings = replace(FAST, log_dir=str(tmp / "logs"), **overrides)
    return ControlPlane.open(db if db is not None else tmp / "cp.db", settings=settings)


def message_chunks(events: Iterable[EventRecord]) -> list[str]:
    """The text of every ``agent_message_chunk`` the agent sent, from a session's log."""
    texts = []
    for event in events:
        if event.kind != EventKind.SESSION_UPDATE:
            continue
        update: Any = event.payload.get("params", {}).get("update", {})
        if update.get("sessionUpdate") == "agent_message_chunk":
            texts.append(str(update.get("content", {}).get("text", "")))
    return texts


def invocations(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "invocations.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
