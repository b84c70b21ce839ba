"""What the subagent bridge needs from the control plane, and nothing more.

The bridge is built by ``ControlPlane.open`` and calls back into it; naming the few methods
it uses as a ``Protocol`` keeps it from reaching into the store or the actors, and keeps
``control_plane.api`` and this package free of an import cycle."""

from __future__ import annotations

import os
from typing import Any, Protocol

from control_plane.outcome import Outcome
from state_machines import SessionState
from store import AgentSpec, CommandRecord, SessionRecord, SpawnResult
from store.watch import CommandWait


class SubagentHost(Protocol):
    def spawn(
        self,
        agent: AgentSpec,
        cwd: str | os.PathLike[str] | None = None,
        prompt: str | None = None,
        *,
        idempotency_key: str | None = None,
        metadata: dict[str, Any] | None = None,
        parent: str | None = None,
        mode: str = "session",
    ) -> SpawnResult: ...

    def get(self, session_id: str) -> SessionRecord: ...

    def resolve_agent(self, agent: str) -> AgentSpec: ...

    def prompt(self, session_id: str, prompt: str) -> CommandRecord: ...

    def cancel(self, session_id: str) -> SessionState: ...

    def command(self, command_id: str) -> CommandRecord: ...

    def commands(self, session_id: str) -> list[CommandRecord]: ...

    def result(self, command_id: str) -> Outcome | None: ...

    def descendants(self, session_id: str) -> list[str]: ...

    def watch_command(self, command_id: str) -> CommandWait: ...
