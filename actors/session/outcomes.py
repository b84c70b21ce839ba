"""What a session's commands come to: a turn's result as the command's outcome, and the
short control commands (set a mode, a config option) run on the agent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.session.recorder import StoreRecorder
from protocol.agent.connection import AgentConnection
from protocol.agent.types import TurnResult
from protocol.loop import ProtocolLoop
from state_machines import CommandState
from store import CommandKind, CommandRecord
from store.ops import turns
from store.writer import WriteContext

CONTROL_TIMEOUT_S = 30.0


def turn_timeout_for(metadata: dict[str, Any], default: float | None) -> float | None:
    """A session's own ``turnTimeoutS`` (metadata, e.g. a batch task's timeout) wins."""
    own = metadata.get("turnTimeoutS")
    return float(own) if own is not None else default


def turn_outcome(
    result: TurnResult, text: str, turn_timeout: float | None
) -> tuple[dict[str, Any], CommandState, str | None]:
    """(outcome, final state, error) of a turn the agent answered: completed, cancelled, or
    failed by the turn timeout (``timedOut`` in the outcome: what announce reads)."""
    outcome: dict[str, Any] = {
        "stopReason": result.stop_reason,
        "usage": result.usage,
        "text": text,
    }
    if result.timed_out:
        outcome["timedOut"] = True
        return outcome, CommandState.FAILED, f"timeout: the turn ran longer than {turn_timeout}s"
    if result.stop_reason == "cancelled":
        return outcome, CommandState.CANCELLED, "cancelled"
    return outcome, CommandState.COMPLETED, None


def run_control(
    conn: AgentConnection, loop: ProtocolLoop, command: CommandRecord
) -> dict[str, Any]:
    """Run a set_mode or set_config_option command on the agent; its answer."""
    payload = command.payload
    if command.kind is CommandKind.SET_MODE:
        return loop.call(conn.set_mode(str(payload["modeId"])), CONTROL_TIMEOUT_S)
    return loop.call(
        conn.set_config_option(str(payload["configId"]), payload["value"]), CONTROL_TIMEOUT_S
    )


def failed_turn(
    session_id: str,
    epoch: int,
    command_ids: tuple[str, ...],
    error: BaseException | None,
    recorder: StoreRecorder,
) -> tuple[Callable[[WriteContext], object], bool]:
    """The write for a turn that ended in an error, and whether the agent is still alive.
    An agent that answered the prompt with an error is alive and well: the turn failed, the
    session stays usable and the client gets the agent's error. Any other error (the agent
    died, broke the protocol) fails the turn and puts the session in ``error``."""
    text = str(error) or type(error).__name__
    agent_error = getattr(error, "agent_error", None)
    if agent_error is not None:
        outcome = {"agentError": agent_error, "text": recorder.take_text()}
        return (
            lambda ctx: turns.finish_turn(
                ctx, session_id, epoch, command_ids, outcome, CommandState.FAILED, text
            ),
            True,
        )
    return lambda ctx: turns.fail_turn(ctx, session_id, epoch, command_ids, text), False


def control_write(
    conn: AgentConnection, loop: ProtocolLoop, session_id: str, epoch: int, command: CommandRecord
) -> Callable[[WriteContext], None]:
    """Run a set_mode / set_config_option command on the agent now; the write that records
    its outcome (the agent's answer, or why it failed)."""
    try:
        result = run_control(conn, loop, command)
    except Exception as exc:
        error = str(exc) or type(exc).__name__
        return lambda ctx: turns.fail_simple(ctx, session_id, epoch, command.id, error)
    return lambda ctx: turns.complete_simple(ctx, session_id, epoch, command.id, result)
