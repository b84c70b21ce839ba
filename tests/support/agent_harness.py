"""Wiring for runtime tests: a real store, the protocol loop, and the bundled example agent as
a real subprocess, its output recorded through ``StoreRecorder``."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from actors.session.recorder import StoreRecorder
from protocol.agent.connection import AgentConnection
from protocol.agent.permissions import AskCallback, Decision, PermissionBroker, PermissionPolicy
from protocol.agent.spawn import agent_environment
from protocol.agent.types import AgentLaunch
from protocol.loop import ProtocolLoop
from store import AgentSpec, EventRecord, Store

T = TypeVar("T")

EXAMPLE = (sys.executable, "-m", "protocol.example_agent")


class AgentHarness:
    def __init__(
        self, tmp_path: Path, loop: ProtocolLoop | None = None, db: str | None = None
    ) -> None:
        """On the store ``db`` (either backend), or on a SQLite file in ``tmp_path``."""
        self.tmp = tmp_path
        self.workdir = tmp_path / "work"
        self.workdir.mkdir(exist_ok=True)
        self.state_file = tmp_path / "agent-state.json"
        self.invocations = tmp_path / "invocations.jsonl"
        self.store = Store.open(db if db is not None else tmp_path / "cp.db")
        self.loop = loop or ProtocolLoop()
        spec = AgentSpec("example-agent", EXAMPLE)
        self.session_id = self.store.spawn(spec, str(self.workdir), None, None, None).session.id
        self.recorder = StoreRecorder(self.store, self.session_id, self.loop)
        self.connections: list[AgentConnection] = []

    def connect(
        self,
        *flags: str,
        policy: PermissionPolicy | None = None,
        ask: AskCallback | None = None,
        max_frame_bytes: int = 16 * 1024 * 1024,
        terminals: bool = False,
    ) -> AgentConnection:
        env = agent_environment(
            {
                "EXAMPLE_AGENT_STATE": str(self.state_file),
                "EXAMPLE_AGENT_INVOCATIONS": str(self.invocations),
            }
        )
        launch = AgentLaunch(
            command=(*EXAMPLE, *flags),
            cwd=str(self.workdir),
            env=env,
            stderr_path=str(self.tmp / "agent.stderr.log"),
            max_frame_bytes=max_frame_bytes,
            shutdown_timeout_s=1.0,
            terminals_enabled=terminals,
        )
        broker = PermissionBroker(policy or PermissionPolicy(Decision.ALLOW), ask)
        conn = AgentConnection(launch, self.recorder, broker)
        self.connections.append(conn)
        return conn

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return self.loop.call(coro, timeout)

    def events(self, kind: str | None = None) -> list[EventRecord]:
        self.recorder.flush_future().result(10)
        return [e for e in self.store.events(self.session_id) if kind is None or e.kind == kind]

    def updates(self, slash_commands: bool = False) -> list[dict[str, Any]]:
        """The recorded updates; without ``slash_commands``, leaving out the
        ``available_commands_update`` the agent sends after each session/new, load or resume."""
        updates = [json.loads(e.raw)["params"]["update"] for e in self.events("session_update")]
        if slash_commands:
            return updates
        return [u for u in updates if u["sessionUpdate"] != "available_commands_update"]

    def message_text(self) -> str:
        return "".join(
            u["content"].get("text", "")
            for u in self.updates()
            if u["sessionUpdate"] == "agent_message_chunk"
        )

    def close(self) -> None:
        for conn in self.connections:
            with contextlib.suppress(Exception):
                self.loop.call(conn.stop(), 15)
        self.loop.stop()
        self.store.close()
