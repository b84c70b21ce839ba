"""One word for how a run ended, shared by everything that reports runs: a subagent's
announce to its parent, ``subagent_result``, and a batch's results file and summary.

Derived from the command's final state and its result's ``timedOut`` flag (set by a turn
timeout), never from the model's text or an error message."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from state_machines.command import CommandState


class OutcomeStatus(StrEnum):
    OK = "ok"  # the turn completed (any stop reason the agent gave)
    FAILED = "failed"  # the agent or its start failed, or attempts ran out
    TIMEOUT = "timeout"  # the turn timeout cancelled it
    CANCELLED = "cancelled"  # a person or a parent cancelled it
    INTERRUPTED = "interrupted"  # its process died mid-turn and it was not run again


# The only final state whose status the result decides (its ``timedOut`` flag): a caller
# that has the result as JSON text parses it for these states only.
STATUS_FROM_RESULT = frozenset({CommandState.FAILED})


def outcome_status(state: CommandState, result: Mapping[str, Any] | None) -> OutcomeStatus | None:
    """The status of a final command; None while it is still queued or running."""
    if state is CommandState.COMPLETED:
        return OutcomeStatus.OK
    if state is CommandState.CANCELLED:
        return OutcomeStatus.CANCELLED
    if state is CommandState.INTERRUPTED:
        return OutcomeStatus.INTERRUPTED
    if state is CommandState.FAILED:
        return OutcomeStatus.TIMEOUT if (result or {}).get("timedOut") else OutcomeStatus.FAILED
    return None
