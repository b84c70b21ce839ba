"""The session actor's transactions: each is one atomic write carrying the fencing epoch.

Composed from the store's operations so that, for example, claiming a prompt, moving the
session to ``running`` and logging the user's prompt commit together or not at all.
"""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import update

from state_machines import TURN_STATES, CommandEvent, CommandState, SessionEvent, SessionState
from state_machines.event_kinds import EventKind
from store import hot_sql as hot
from store import queries
from store.ops import commands, events, fencing
from store.ops import sessions as session_ops
from store.ops._shared import (
    end_turn_with_event,
    start_turn_with_event,
    transition_command,
    transition_session,
)
from store.ops.interrupted import (
    KEPT_NOTHING,
    RestartTerms,
    as_continuation,
    reached_agent,
    session_policy,
)
from store.records import CommandKind, CommandRecord, NewEvent
from store.schema import sessions
from store.writer import WriteContext


def begin_next(
    ctx: WriteContext,
    session_id: str,
    epoch: int,
    collect: bool,
    max_running_children: int | None = None,
    restart: RestartTerms = KEPT_NOTHING,
) -> list[CommandRecord]:
    """Claim the next command (with ``collect``: every queued prompt at the head of the queue,
    merged into one turn). A prompt moves the session to ``running`` and logs a ``prompt``.
    A child whose parent already has ``max_running_children`` running claims nothing (it
    stays queued; the single writer makes this check race-free).

    ``restart``: whether the agent was restored with its conversation (resumed or loaded)
    and what a prompt a crash or Ctrl-C cut off then gets: continued with a continuation
    prompt, or ended ``interrupted`` (``interrupted.py``)."""
    fencing.check_epoch(ctx.conn, session_id, epoch)
    if (
        max_running_children is not None
        and queries.siblings_running(ctx.raw, session_id) >= max_running_children
    ):
        return []
    return _start_claimed(
        ctx, session_id, epoch, commands.claim_next(ctx, session_id), collect, restart
    )


def _start_claimed(
    ctx: WriteContext,
    session_id: str,
    epoch: int,
    first: CommandRecord | None,
    collect: bool,
    restart: RestartTerms,
) -> list[CommandRecord]:
    """``begin_next`` once its first claim is made: past prompts already in a restored
    conversation (continued or reported), the collected prompts, and a prompt's turn
    started."""
    continued = False
    while first is not None and restart.context_kept and _was_interrupted(first):
        metadata = queries.get_session(ctx.conn, session_id).metadata
        if session_policy(metadata, restart.policy) == "continue":
            if reached_agent(ctx, first, restart):
                first, continued = as_continuation(first, restart.continuation), True
            break  # else it never reached the agent: sent as it is
        _report_interrupted(ctx, first)
        first = commands.claim_next(ctx, session_id)
    if first is None:
        return []
    claimed = [first]
    if first.kind is CommandKind.PROMPT:
        while collect and not continued:
            following = queries.next_queued(ctx.conn, session_id)
            if following is None or following.kind is not CommandKind.PROMPT:
                break
            nxt = commands.claim_next(ctx, session_id)
            assert nxt is not None
            claimed.append(nxt)
        # The session to running and the prompt event's seq in one UPDATE of its row.
        seq = start_turn_with_event(ctx.raw, session_id, epoch)
        content = [block for cmd in claimed for block in cmd.payload.get("content", [])]
        payload: dict[str, Any] = {"commandId": first.id, "content": content}
        if continued:
            payload["continuation"] = True
            payload["attempt"] = first.attempts
        if len(claimed) > 1:
            payload["commandIds"] = [c.id for c in claimed]
        events.write_event(ctx, session_id, first.id, NewEvent(EventKind.PROMPT, payload), seq)
    return claimed


def claim_submitted(
    ctx: WriteContext,
    session_id: str,
    command_id: str,
    epoch: int,
    collect: bool,
    max_running_children: int | None = None,
    restart: RestartTerms = KEPT_NOTHING,
) -> list[CommandRecord]:
    """Claim the prompt ``command_id`` in the transaction that queued it, for the session's
    live idle owner (its actor's claim offer): ``begin_next`` as the actor would run it, but
    only while the session is still ``idle`` at the owner's ``epoch`` and the prompt is the
    head of its queue. Otherwise nothing is claimed and nothing raised: the enqueue stands
    and the owner claims as after any enqueue. The terms and the claim are one statement
    (``CLAIM_SUBMITTED``)."""
    if (
        max_running_children is not None
        and queries.siblings_running(ctx.raw, session_id) >= max_running_children
    ):
        return []
    now = time.time()
    row = ctx.raw.execute(
        hot.CLAIM_SUBMITTED, (now, now, command_id, session_id, session_id, epoch)
    ).fetchone()
    if row is None:
        return []
    first = hot.command_from_tuple(row)
    return _start_claimed(ctx, session_id, epoch, first, collect, restart)


def unclaim(
    ctx: WriteContext, session_id: str, epoch: int, claimed: list[CommandRecord], why: str
) -> None:
    """Put prompts claimed for a turn that never started back in the queue, unsent: the
    claim's attempt is given back (an agent that keeps its conversation must not take them
    for sent), the session returns to ``idle``, and an ``interrupted`` event (``willRetry``)
    says why. A turn cancelled meanwhile (the session is ``cancelling``) ends as a cancelled
    turn instead, as if the agent had stopped at once."""
    fencing.check_epoch(ctx.conn, session_id, epoch)
    state = queries.get_session(ctx.conn, session_id).state
    ids = tuple(command.id for command in claimed)
    if state is SessionState.CANCELLING:
        outcome = {"stopReason": "cancelled"}
        error = f"cancelled before its turn started ({why})"
        finish_turn(ctx, session_id, epoch, ids, outcome, CommandState.CANCELLED, error)
        return
    for command in claimed:
        attempts = max(0, command.attempts - 1)
        transition_command(ctx, command.id, CommandEvent.REQUEUE, attempts=attempts)
        note = {
            "commandId": command.id,
            "attempts": attempts,
            "willRetry": True,
            "reason": f"not sent: {why}",
        }
        events.append_events(ctx, session_id, command.id, [NewEvent(EventKind.INTERRUPTED, note)])
    if state in TURN_STATES:
        transition_session(ctx.conn, session_id, SessionEvent.TURN_ENDED, epoch=epoch)


def _stopped_by_budget(ctx: WriteContext, session_id: str) -> str | None:
    """A turn cancelled because a budget stopped its session says so, as the queued prompts
    that budget cancelled do (read only for a cancelled turn)."""
    stopped = queries.session_usage(ctx.conn, session_id).stopped
    return None if stopped is None else f"budget exceeded: {stopped.budget}"


def _was_interrupted(command: CommandRecord) -> bool:
    """A prompt claimed before (each claim counts an attempt): a crash cut its run short and
    recovery queued it again."""
    return command.kind is CommandKind.PROMPT and command.attempts > 1


def _report_interrupted(ctx: WriteContext, command: CommandRecord) -> None:
    reason = (
        "interrupted by a restart of the control plane; the agent restored the conversation "
        "with this prompt in it, so it was not sent again"
    )
    # This claim sent nothing: it does not count as an attempt.
    commands.interrupt_command(ctx, command.id, reason, attempts=command.attempts - 1)
    events.append_events(
        ctx,
        command.session_id,
        command.id,
        [NewEvent(EventKind.TURN_INTERRUPTED, {"commandId": command.id, "reason": reason})],
    )


def finish_turn(
    ctx: WriteContext,
    session_id: str,
    epoch: int,
    command_ids: tuple[str, ...],
    outcome: dict[str, Any],
    final: CommandState,
    error: str | None,
) -> bool:
    """Record the turn's outcome on every command it served and return the session to idle.
    Returns whether a command is queued for the session (read in this transaction: the
    actor knows whether to look for work without a read of its own)."""
    # First, and fenced: a stale owner's outcome goes no further. The session back to idle,
    # the turn_ended event's seq and whether anything is queued, in one UPDATE of its row.
    seq, queued = end_turn_with_event(ctx.raw, session_id, epoch)
    ended = {
        "commandId": command_ids[0],
        "stopReason": outcome.get("stopReason"),
        "usage": outcome.get("usage"),
    }
    events.write_event(ctx, session_id, command_ids[0], NewEvent(EventKind.TURN_ENDED, ended), seq)
    for command_id in command_ids:
        if final is CommandState.COMPLETED:
            commands.complete(ctx, command_id, outcome)
        elif final is CommandState.CANCELLED:
            why = _stopped_by_budget(ctx, session_id) or error or "cancelled"
            commands.cancel_command(ctx, command_id, why, result=outcome)
        else:
            commands.fail(ctx, command_id, error or "failed", result=outcome)
    return queued


def fail_turn(
    ctx: WriteContext, session_id: str, epoch: int, command_ids: tuple[str, ...], error: str
) -> None:
    """The agent died or broke the protocol mid-turn: commands failed, session to ``error``."""
    fencing.check_epoch(ctx.conn, session_id, epoch)
    events.append_events(
        ctx,
        session_id,
        command_ids[0],
        [NewEvent(EventKind.TURN_FAILED, {"commandId": command_ids[0], "error": error})],
    )
    for command_id in command_ids:
        if queries.get_command(ctx.conn, command_id).state is CommandState.RUNNING:
            commands.fail(ctx, command_id, error)
    state = queries.get_session(ctx.conn, session_id).state
    if state is not SessionState.ERROR:
        transition_session(
            ctx.conn, session_id, SessionEvent.AGENT_DIED, epoch=epoch, last_error=error
        )


def agent_started(
    ctx: WriteContext,
    session_id: str,
    epoch: int,
    acp_session_id: str,
    how: str,
    details: dict[str, Any],
    process_tree: dict[str, Any] | None = None,
    capabilities: tuple[tuple[str, ...], dict[str, Any]] | None = None,
) -> None:
    """A (re)started agent holds the session: ``creating -> idle`` or ``error -> idle``.
    Its process tree is recorded so that recovery can kill what a crash left running, and
    (``capabilities``: command, ``initialize`` answer) what the agent command offers."""
    fencing.check_epoch(ctx.conn, session_id, epoch)
    if capabilities is not None:
        session_ops.record_agent_capabilities(ctx, *capabilities)
    state = queries.get_session(ctx.conn, session_id).state
    ctx.conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id)
        .values(
            acp_session_id=acp_session_id,
            updated_at=time.time(),
            agent_process=None if process_tree is None else json.dumps(process_tree),
        )
    )
    if state is SessionState.CREATING:
        transition_session(ctx.conn, session_id, SessionEvent.CREATED, epoch=epoch)
    elif state is SessionState.ERROR:
        transition_session(
            ctx.conn, session_id, SessionEvent.RESTARTED, epoch=epoch, last_error=None
        )
    events.append_events(
        ctx, session_id, None, [NewEvent(EventKind.AGENT_STARTED, {"how": how, **details})]
    )


def start_failed(
    ctx: WriteContext,
    session_id: str,
    epoch: int,
    error: str,
    agent_error: dict[str, Any] | None = None,
    stderr_tail: list[str] | None = None,
) -> str | None:
    """The agent could not be started: session to ``error``, and the command that needed
    the agent fails with the reason (it is not retried forever). Returns its id.
    ``agent_error``: the agent's own JSON-RPC error (e.g. -32000 authentication required).
    ``stderr_tail``: the end of the stderr of an agent that exited (redacted), kept with the
    failure: the start's clean-up kills the process, and an ``agent_exited`` event is only
    recorded for an exit nobody asked for, which a loaded machine can report too late."""
    fencing.check_epoch(ctx.conn, session_id, epoch)
    state = queries.get_session(ctx.conn, session_id).state
    event = SessionEvent.AGENT_DIED if state is SessionState.IDLE else SessionEvent.START_FAILED
    transition_session(ctx.conn, session_id, event, epoch=epoch, last_error=error)
    payload: dict[str, Any] = {"error": error}
    if agent_error is not None:
        payload["agentError"] = agent_error
    if stderr_tail:
        payload["stderrTail"] = stderr_tail
    events.append_events(ctx, session_id, None, [NewEvent(EventKind.AGENT_START_FAILED, payload)])
    command = commands.claim_next(ctx, session_id)
    if command is None:
        return None
    result = None if agent_error is None else {"agentError": agent_error}
    commands.fail(ctx, command.id, f"agent could not start: {error}", result=result)
    return command.id


def agent_gone(ctx: WriteContext, session_id: str, epoch: int, exit_code: int | None) -> None:
    """The agent exited while the session was idle: ``idle -> error`` (restart on next use)."""
    fencing.check_epoch(ctx.conn, session_id, epoch)
    if queries.get_session(ctx.conn, session_id).state is SessionState.IDLE:
        transition_session(
            ctx.conn,
            session_id,
            SessionEvent.AGENT_DIED,
            epoch=epoch,
            last_error=f"agent exited with code {exit_code}",
        )


def complete_simple(
    ctx: WriteContext, session_id: str, epoch: int, command_id: str, result: dict[str, Any]
) -> None:
    fencing.check_epoch(ctx.conn, session_id, epoch)
    commands.complete(ctx, command_id, result)


def fail_simple(
    ctx: WriteContext, session_id: str, epoch: int, command_id: str, error: str
) -> None:
    fencing.check_epoch(ctx.conn, session_id, epoch)
    commands.fail(ctx, command_id, error)
