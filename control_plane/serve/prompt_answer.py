"""What ``session/prompt`` answers, from the outcome of its durable command (stdio and
network serve alike)."""

from __future__ import annotations

from acp.schema import PromptResponse

from control_plane.outcome import Outcome
from protocol.face.rpc_errors import agent_refused, turn_failed
from state_machines import CommandState


def prompt_response(outcome: Outcome) -> PromptResponse:
    """What ``session/prompt`` answers for a turn's outcome (a failed turn is an error)."""
    if outcome.state is CommandState.FAILED and not outcome.stop_reason:
        if outcome.agent_error is not None:
            raise agent_refused({"agentError": outcome.agent_error})
        raise turn_failed(outcome.error or "the turn failed")
    if outcome.state is CommandState.INTERRUPTED:
        # A repeated request for a prompt a crash cut short: it ended, and is not re-run.
        return PromptResponse(stop_reason="cancelled", field_meta={"acpctl": {"interrupted": True}})
    stop = outcome.stop_reason
    if stop is None:
        stop = "cancelled" if outcome.state is CommandState.CANCELLED else "end_turn"
    return PromptResponse(stop_reason=stop)
