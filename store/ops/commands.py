"""Command writes: enqueue, claim, complete, fail, interrupt, cancel."""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import select

from state_machines import (
    TURN_STATES,
    BudgetExceeded,
    CommandEvent,
    CommandState,
    IdempotencyConflict,
    QueueMode,
    SessionClosed,
    SessionEvent,
    SessionNotFound,
    SessionState,
)
from state_machines.event_kinds import EventKind
from store import hot_sql as hot
from store import queries
from store.faults import fault_point
from store.hashing import request_hash
from store.ops._shared import (
    DEFAULT_MAX_ATTEMPTS,
    compact_json,
    insert_command,
    notify_session,
    transition_command,
    transition_session,
)
from store.ops.events import insert_events
from store.records import (
    CommandKind,
    CommandRecord,
    EnqueueResult,
    NewEvent,
)
from store.schema import commands
from store.writer import WriteContext


def find_by_key(ctx: WriteContext, session_id: str, key: str | None) -> str | None:
    """The id of the session's command with this idempotency key, if any."""
    if key is None:
        return None
    row = ctx.raw.execute(hot.COMMAND_BY_KEY, (session_id, key)).fetchone()
    return None if row is None else str(row[0])


def enqueue(
    ctx: WriteContext,
    session_id: str,
    kind: CommandKind,
    payload: dict[str, Any],
    idempotency_key: str | None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    priority: int = 0,
    key_is_new: bool = False,
    seq: int | None = None,
) -> EnqueueResult:
    """Queue a command at the session's next seq. A known key with the same kind and payload
    returns the original command (with its outcome once final); with another, a conflict.
    A closed session refuses new commands (``SessionClosed``). ``key_is_new``: the caller
    looked the key up in this transaction and found nothing, so it is not looked up again.
    ``seq``: the caller took the command's seq from the session in this transaction."""
    if idempotency_key is not None and not key_is_new:
        row = ctx.raw.execute(hot.COMMAND_BY_KEY, (session_id, idempotency_key)).fetchone()
        if row is not None:
            if row[1] != request_hash(kind.value, payload):
                raise IdempotencyConflict(idempotency_key, f"session {session_id}", row[0])
            existing = hot.fetch_command(ctx.raw, row[0])
            assert existing is not None
            return EnqueueResult(hot.command_from_tuple(existing), created=False)
    command = insert_command(
        ctx, session_id, kind, payload, idempotency_key, max_attempts, priority, seq
    )
    fault_point("enqueue.after_insert")
    return EnqueueResult(command, created=True)


def claim_next(ctx: WriteContext, session_id: str) -> CommandRecord | None:
    """Move the session's next queued command (highest priority, then lowest seq) to
    ``running``; each claim counts as an attempt."""
    now = time.time()
    row = ctx.raw.execute(hot.CLAIM_NEXT, (now, now, session_id)).fetchone()
    if row is None:
        if not hot.session_exists(ctx.raw, session_id):
            raise SessionNotFound(session_id)  # unknown ids are an error, not "no work"
        return None
    return hot.command_from_tuple(row)


def complete(ctx: WriteContext, command_id: str, result: dict[str, Any]) -> CommandRecord:
    return transition_command(
        ctx, command_id, CommandEvent.COMPLETE, result=compact_json(result), finished_at=time.time()
    )


def fail(
    ctx: WriteContext, command_id: str, error: str, result: dict[str, Any] | None = None
) -> CommandRecord:
    values: dict[str, Any] = {"error": error, "finished_at": time.time()}
    if result is not None:
        values["result"] = compact_json(result)
    return transition_command(ctx, command_id, CommandEvent.FAIL, **values)


def interrupt_command(
    ctx: WriteContext, command_id: str, error: str, **values: Any
) -> CommandRecord:
    """A run a crash cut short that will not be sent again: final ``interrupted``."""
    return transition_command(
        ctx, command_id, CommandEvent.INTERRUPT, error=error, finished_at=time.time(), **values
    )


def cancel_command(
    ctx: WriteContext, command_id: str, reason: str, result: dict[str, Any] | None = None
) -> CommandRecord:
    values: dict[str, Any] = {"error": reason, "finished_at": time.time()}
    if result is not None:
        values["result"] = compact_json(result)
    return transition_command(ctx, command_id, CommandEvent.CANCEL, **values)


def cancel(ctx: WriteContext, session_id: str, include_queued: bool = False) -> SessionState:
    """Ask the running turn to stop (``running -> cancelling``); optionally cancel the queue.

    Idempotent: where no turn runs the table absorbs ``cancel``.
    """
    conn = ctx.conn
    before = queries.get_session(conn, session_id).state
    state = transition_session(conn, session_id, SessionEvent.CANCEL)
    if include_queued:
        cancel_queued(ctx, session_id, "cancelled with the session's queue")
    if before is SessionState.RUNNING:
        insert_events(ctx, session_id, None, [NewEvent(EventKind.CANCEL_REQUESTED, {})])
        notify_session(ctx, session_id)  # the owner, maybe on another node, stops the turn
    return state


def cancel_tree(
    ctx: WriteContext, session_id: str, include_queued: bool = False
) -> tuple[SessionState, list[str]]:
    """``cancel`` the session and every descendant whose turn runs, in one transaction (it
    used to be one per session): the root's new state, and the descendants asked to stop
    (their owners cancel the agents' turns)."""
    state = cancel(ctx, session_id, include_queued)
    asked = []
    for child_id in queries.descendants(ctx.conn, session_id):
        if queries.get_session(ctx.conn, child_id).state in TURN_STATES:
            cancel(ctx, child_id)
            asked.append(child_id)
    return state, asked


def cancel_queued(
    ctx: WriteContext, session_id: str, reason: str, running_too: bool = False
) -> int:
    states = [CommandState.QUEUED.value] + ([CommandState.RUNNING.value] if running_too else [])
    ids = (
        ctx.conn.execute(
            select(commands.c.id).where(
                commands.c.session_id == session_id, commands.c.state.in_(states)
            )
        )
        .scalars()
        .all()
    )
    for command_id in ids:
        transition_command(
            ctx, command_id, CommandEvent.CANCEL, error=reason, finished_at=time.time()
        )
    return len(ids)


def submit_prompt(
    ctx: WriteContext,
    session_id: str,
    payload: dict[str, Any],
    idempotency_key: str | None,
    mode: QueueMode | None,
) -> tuple[CommandRecord, bool]:
    """Queue a prompt under a queue mode (the session's own unless ``mode`` is given); returns
    the command and whether the running turn must be told to cancel. A retry (a key seen
    before) returns the first command and cancels nothing, whatever the mode."""
    if find_by_key(ctx, session_id, idempotency_key) is not None:
        retried = enqueue(ctx, session_id, CommandKind.PROMPT, payload, idempotency_key)
        return retried.command, False
    # The new prompt's seq, the queue mode and the budget's stop in one statement (all are
    # needed on every new prompt); a refusal below raises and the rollback returns the seq.
    terms = ctx.raw.execute(hot.PROMPT_SEQ_AND_TERMS, (session_id,)).fetchone()
    if terms is None:
        if not hot.session_exists(ctx.raw, session_id):
            raise SessionNotFound(session_id)
        raise SessionClosed(session_id)
    seq, queue_mode, stopped_by = terms
    effective = mode or QueueMode(queue_mode)
    raise_if_stopped(session_id, stopped_by)
    if effective is QueueMode.INTERRUPT:
        cancel(ctx, session_id, include_queued=True)
    elif effective is QueueMode.STEER:
        cancel(ctx, session_id)
    priority = 1 if effective is QueueMode.STEER else 0
    command = enqueue(
        ctx,
        session_id,
        CommandKind.PROMPT,
        payload,
        idempotency_key,
        priority=priority,
        key_is_new=True,  # looked up above, in this transaction
        seq=seq,
    ).command
    return command, effective in (QueueMode.STEER, QueueMode.INTERRUPT)


def raise_if_stopped(session_id: str, stopped_by: str | None) -> None:
    """``BudgetExceeded`` if ``stopped_by`` (the session's ``session_usage.stopped_by``)
    says a budget stopped it."""
    if stopped_by:
        reached = json.loads(stopped_by)  # counted once it is final (telemetry.write_failed)
        raise BudgetExceeded(session_id, reached["budget"], reached["limit"], reached["used"])
