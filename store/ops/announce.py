"""A child session's finished runs announced to its parent, exactly once: in the transaction
that ends the child's turn (``announce_turn``, the session actor's), and after any event that
ends a run by ``actors/delivery/AnnounceSink`` (``announce_finished_runs``: what the turn's
end did not announce, say a run interrupted by a crash; see ``actors/delivery/announce.py``).

For every finished prompt of the child not announced yet: an ``announce`` event in the
parent's log and, by default, a follow-up prompt for the parent whose idempotency key is
derived from the child's run, in one transaction. The status comes from the run's final
state, never from the model's text: completed -> ok, cancelled -> cancelled, interrupted ->
interrupted, failed by a turn timeout -> timeout, failed -> error.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

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
    if queries.get_session(ctx.conn, parent_id).state is SessionState.CLOSED:
        return 0
    runs = unannounced_runs(ctx.conn, child_id, parent_id)
    return _announce(ctx, child_id, parent_id, as_prompt, runs)


def announce_turn(
    ctx: WriteContext, child_id: str, command_ids: tuple[str, ...], as_prompt: bool
) -> tuple[str, int] | None:
    """In the transaction that ends a child's turn: announce that turn's runs to the parent
    its announce binding names, so the announce commits with the turn's end instead of a
    delivery and a commit later. Returns the parent's id and how many runs were announced;
    None when the child does not announce (or its parent is closed)."""
    parent_id = queries.announce_parent(ctx.conn, child_id)
    if parent_id is None:
        return None
    if queries.get_session(ctx.conn, parent_id).state is SessionState.CLOSED:
        return None
    turn = [queries.get_command(ctx.conn, command_id) for command_id in command_ids]
    runs = unannounced_runs(ctx.conn, child_id, parent_id, turn)
    return parent_id, _announce(ctx, child_id, parent_id, as_prompt, runs)


def unannounced_runs(
    conn: Connection,
    child_id: str,
    parent_id: str,
    commands: list[CommandRecord] | None = None,
) -> list[CommandRecord]:
    """The finished prompt runs of the child (of ``commands``, default all of them) not
    announced to the parent yet."""
    candidates = queries.commands_of(conn, child_id) if commands is None else commands
    return [
        command
        for command in candidates
        if command.kind is CommandKind.PROMPT
        and command.is_final
        and not queries.announced(conn, parent_id, command.id)
    ]


def _announce(
    ctx: WriteContext,
    child_id: str,
    parent_id: str,
    as_prompt: bool,
    runs: list[CommandRecord],
) -> int:
    for command in runs:
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
    return len(runs)


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
