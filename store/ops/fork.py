"""A fork: a new session whose log starts with another session's conversation up to the
end of one of its turns, in one transaction with its spawn (``ControlPlane.fork``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, select

from state_machines import CommandState, ControlPlaneError
from state_machines.event_kinds import EventKind
from store.ops.events import insert_events
from store.ops.sessions import spawn
from store.records import AgentSpec, CommandKind, NewEvent, SpawnResult
from store.schema import commands, events
from store.writer import WriteContext

# What a conversation is made of, in a session's log: copied into a fork.
CONVERSATION_KINDS = (
    EventKind.PROMPT.value,
    EventKind.SESSION_UPDATE.value,
    EventKind.TURN_ENDED.value,
    EventKind.TURN_FAILED.value,
    EventKind.TURN_INTERRUPTED.value,
    EventKind.ANNOUNCE.value,
    EventKind.TRANSCRIPT_ENTRY.value,  # an imported conversation (store/ops/imports.py)
)


FINISHED = (CommandState.COMPLETED, CommandState.FAILED, CommandState.CANCELLED)


class ForkRefused(ControlPlaneError, ValueError):
    """A fork point that is not the end of a finished turn of the session."""


def turn_end(conn: Connection, session_id: str, turn: int | None) -> tuple[int, int]:
    """(the turn's command seq, the seq of its end event): turn ``turn`` (a prompt's
    command seq), or the last turn that ended; a prompt cancelled while queued, or failed
    at its agent's start, was no turn. ``ForkRefused`` otherwise."""
    ends = (
        select(commands.c.seq, func.max(events.c.seq).label("end"))
        .join(events, events.c.command_id == commands.c.id)
        .where(
            commands.c.session_id == session_id,
            commands.c.kind == CommandKind.PROMPT.value,
            commands.c.state.in_([s.value for s in FINISHED]),
            events.c.session_id == session_id,
            events.c.kind.in_([EventKind.TURN_ENDED.value, EventKind.TURN_FAILED.value]),
        )
        .group_by(commands.c.seq)
        .order_by(commands.c.seq)
    )
    rows = conn.execute(ends).all()
    if not rows:
        raise ForkRefused(f"session {session_id} has no finished turn to fork from")
    chosen = rows[-1] if turn is None else next((r for r in rows if r.seq == turn), None)
    if chosen is None:
        turns = ", ".join(str(r.seq) for r in rows)
        raise ForkRefused(f"session {session_id} has no finished turn {turn} (turns: {turns})")
    return int(chosen.seq), int(chosen.end)


def fork_session(
    ctx: WriteContext,
    source_id: str,
    turn: int | None,
    up_to_seq: int,
    agent: AgentSpec,
    cwd: str,
    metadata: dict[str, Any],
    idempotency_key: str | None,
) -> SpawnResult:
    """The new session (a spawn without a prompt) with the source's conversation events up
    to ``up_to_seq`` copied into its log, and a ``forked`` event after them. ``turn`` is
    None for an imported session, which has no turns (``imports.resume_imported``)."""
    result = spawn(ctx, agent, cwd, None, None, idempotency_key, metadata=metadata)
    if not result.created:
        return result  # the same fork asked again
    rows = ctx.conn.execute(
        select(events.c.kind, events.c.payload)
        .where(
            events.c.session_id == source_id,
            events.c.seq <= up_to_seq,
            events.c.kind.in_(CONVERSATION_KINDS),
        )
        .order_by(events.c.seq)
    ).all()
    copied = [NewEvent(EventKind(row.kind), row.payload) for row in rows]
    marker = {"from": source_id, "turn": turn, "upToSeq": up_to_seq, "events": len(copied)}
    insert_events(ctx, result.session.id, None, [*copied, NewEvent(EventKind.FORKED, marker)])
    return result
