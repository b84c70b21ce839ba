"""A child session's finished runs announced to its parent, exactly once (the transaction
of ``actors/delivery/AnnounceSink``; see ``actors/delivery/announce.py`` for when it runs).

For every finished prompt of the child not announced yet: an ``announce`` event in the
parent's log and, by default, a follow-up prompt for the parent whose idempotency key is
derived from the child's run, in one transaction. The status comes from the run's final
state, never from the model's text: completed -> ok, cancelled -> cancelled, interrupted ->
interrupted, failed by a turn timeout -> timeout, failed -> error.
"""

from __future__ import annotations

from typing import Any

from state_machines import OutcomeStatus, SessionState, outcome_status
from state_machines.event_kinds import EventKind
from store import queries
from store.ops.commands import enqueue
from store.ops.events import append_events
from store.records import CommandKind, CommandRecord, NewEvent
from store.writer import WriteContext


def status_of(command: CommandRecord) -> OutcomeStatus:
    """The finished run's status (state_machines/outcome_status.py)."""
    status = outcome_status(command.state, command.result)
    if status is None:
        raise ValueError(f"command {command.id} is not final: {command.state.value}")
    return status


def announce_finished_runs(
    ctx: WriteContext, child_id: str, parent_id: str, as_prompt: bool
) -> int:
    """Announce every finished, not yet announced prompt run of the child; returns how many."""
    conn = ctx.conn
    parent = queries.get_session(conn, parent_id)
    if parent.state is SessionState.CLOSED:
        return 0
    done = 0
    for command in queries.commands_of(conn, child_id):
        if command.kind is not CommandKind.PROMPT or not command.is_final:
            continue
        if queries.announced(conn, parent_id, command.id):
            continue
        payload = _announcement(child_id, command)
        append_events(ctx, parent_id, None, [NewEvent(EventKind.ANNOUNCE, payload)])
        if as_prompt:
            text = f"[subagent {child_id} finished: status={payload['status']}]\n{payload['text']}"
            enqueue(
                ctx,
                parent_id,
                CommandKind.PROMPT,
                {"content": [{"type": "text", "text": text}]},
                f"announce:{command.id}",
            )
        done += 1
    return done


def _announcement(child_id: str, command: CommandRecord) -> dict[str, Any]:
    result = command.result or {}
    started = command.started_at or command.created_at
    finished = command.finished_at or started
    return {
        "childSessionId": child_id,
        "commandId": command.id,
        "status": status_of(command),
        "text": str(result.get("text") or command.error or ""),
        "usage": result.get("usage"),
        "durationMs": int((finished - started).total_seconds() * 1000),
    }
