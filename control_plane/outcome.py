"""``Outcome``: what a host wants from a finished command."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from state_machines import CommandState, OutcomeStatus, outcome_status
from store import CommandRecord


@dataclass(frozen=True)
class Outcome:
    command_id: str
    state: CommandState
    stop_reason: str | None
    text: str
    usage: dict[str, Any] | None
    error: str | None
    # The agent's own JSON-RPC error ({"code", "message", "data"}) when it answered with one.
    agent_error: dict[str, Any] | None = None
    timed_out: bool = False  # the turn timeout failed it

    @property
    def status(self) -> OutcomeStatus:
        """The same word a subagent announce and a batch results file use."""
        status = outcome_status(self.state, {"timedOut": self.timed_out})
        if status is None:
            raise ValueError(f"command {self.command_id} is not final: {self.state.value}")
        return status

    @property
    def interrupted(self) -> bool:
        """A crash cut the turn short and it was not sent again (``docs/operations.md``)."""
        return self.state is CommandState.INTERRUPTED

    @property
    def ok(self) -> bool:
        return self.state is CommandState.COMPLETED

    @classmethod
    def of(cls, command: CommandRecord) -> Outcome:
        result = command.result or {}
        return cls(
            command_id=command.id,
            state=command.state,
            stop_reason=result.get("stopReason"),
            text=str(result.get("text") or ""),
            usage=result.get("usage"),
            error=command.error,
            agent_error=result.get("agentError"),
            timed_out=bool(result.get("timedOut")),
        )
