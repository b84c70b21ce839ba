"""Recovery of work a dead (or restarted) owner left in flight."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select, update

from state_machines import (
    CommandEvent,
    CommandState,
    SessionEvent,
    SessionState,
)
from state_machines.event_kinds import EventKind
from store.ops._shared import transition_command, transition_session
from store.ops.commands import interrupt_command
from store.ops.events import insert_events
from store.ops.permissions import withdraw_for_sessions
from store.ownership import this_owner
from store.queries import orphaned_sessions
from store.queries.nodes import dead_owners
from store.records import (
    CommandKind,
    NewEvent,
    RecoveryReport,
)
from store.rows import command_from_row
from store.schema import commands, sessions
from store.writer import WriteContext


def recover(ctx: WriteContext, me: str | None = None, include_mine: bool = True) -> RecoveryReport:
    """Commands found ``running`` in sessions whose owner is gone were interrupted: back to
    ``queued`` while the attempt budget lasts, else ``failed``; an ``interrupted`` event
    records each. Those sessions, if mid-turn, go to ``error``: their agent died with the old
    process, and the next command restarts it. Sessions a live process owns are left alone."""
    return recover_sessions(ctx, orphaned_sessions(ctx.conn, me or this_owner(), include_mine))


def recover_sessions(ctx: WriteContext, orphaned: set[str]) -> RecoveryReport:
    """``recover`` for the given sessions, known to have no live owner."""
    conn = ctx.conn
    running = conn.execute(
        select(commands)
        .where(commands.c.state == CommandState.RUNNING.value, commands.c.session_id.in_(orphaned))
        .order_by(commands.c.created_at)
    ).all()
    requeued: list[str] = []
    failed: list[str] = []
    reporting = _reporting_sessions(conn, {row.session_id for row in running})
    for row in running:
        cmd = command_from_row(row)
        retry = cmd.attempts < cmd.max_attempts
        reason = "the control plane stopped while the command was running"
        if cmd.kind is CommandKind.PROMPT and cmd.session_id in reporting:
            retry = False
            interrupt_command(
                ctx,
                cmd.id,
                "interrupted by a restart of the control plane; not sent again "
                "(this session reports interrupted turns)",
            )
            failed.append(cmd.id)
        elif retry:
            transition_command(ctx, cmd.id, CommandEvent.REQUEUE)
            requeued.append(cmd.id)
        else:
            transition_command(
                ctx,
                cmd.id,
                CommandEvent.FAIL,
                error=(
                    f"interrupted {cmd.attempts} times; "
                    f"attempt budget of {cmd.max_attempts} exhausted"
                ),
                finished_at=time.time(),
            )
            failed.append(cmd.id)
        insert_events(
            ctx,
            cmd.session_id,
            cmd.id,
            [
                NewEvent(
                    EventKind.INTERRUPTED,
                    {
                        "commandId": cmd.id,
                        "attempts": cmd.attempts,
                        "willRetry": retry,
                        "reason": reason,
                    },
                )
            ],
        )
    to_error: list[str] = []
    mid_turn = conn.execute(
        select(sessions.c.id).where(
            sessions.c.state.in_([SessionState.RUNNING.value, SessionState.CANCELLING.value]),
            sessions.c.id.in_(orphaned),
        )
    ).scalars()
    for session_id in list(mid_turn):
        transition_session(
            conn, session_id, SessionEvent.AGENT_DIED, last_error="interrupted by a restart"
        )
        to_error.append(session_id)
    if orphaned:
        # A permission request its agent asked died with it: withdrawn, so that no node
        # keeps putting it to its clients (control_plane/remote/permissions.py).
        withdraw_for_sessions(ctx, orphaned)
        conn.execute(update(sessions).where(sessions.c.id.in_(orphaned)).values(owner=None))
    return RecoveryReport(tuple(requeued), tuple(failed), tuple(to_error))


@dataclass(frozen=True)
class DeadOwnersReleased:
    owners: tuple[str, ...] = ()  # the owners found gone
    sessions: tuple[str, ...] = ()  # every session they held, now unowned
    recovery: RecoveryReport = field(default_factory=RecoveryReport)  # left mid-turn


def release_dead_owners(ctx: WriteContext, me: str) -> DeadOwnersReleased:
    """Every session whose owner is gone (``dead_owners``: its lease ran out, or its process
    left this host), idle ones included, is given up: no owner, and its epoch raised, as a
    takeover raises it, so an owner judged dead while it only stood still has every later
    write refused (``StaleEpoch``). What it left mid-turn is recovered in the same
    transaction (``recover_sessions``). Any process may then take the session, with its
    next work; until then nobody holds it. Judged again inside this transaction: a
    sweep's earlier read only saves the write when there is nothing to do."""
    dead = dead_owners(ctx.conn, me)
    if not dead:
        return DeadOwnersReleased()
    # Every session of theirs, closed ones too (the read looks at open ones only): a
    # closed session that names a gone node would keep that node's row for ever.
    held = ctx.conn.execute(
        update(sessions)
        .where(sessions.c.owner.in_(dead))
        .values(epoch=sessions.c.epoch + 1)
        .returning(sessions.c.id)
    ).scalars()
    released = set(held)
    report = recover_sessions(ctx, released)  # and clears their owner
    return DeadOwnersReleased(tuple(dead), tuple(sorted(released)), report)


def _reporting_sessions(conn: Connection, session_ids: set[str]) -> set[str]:
    """Sessions whose interrupted prompts are reported, never sent again
    (``interruptedTurns = "report"`` in their metadata: serve's sessions by default)."""
    if not session_ids:
        return set()
    rows = conn.execute(
        select(sessions.c.id, sessions.c.metadata).where(sessions.c.id.in_(session_ids))
    ).all()
    return {r.id for r in rows if interrupted_turns_policy(json.loads(r.metadata)) == "report"}


def interrupted_turns_policy(metadata: dict[str, Any]) -> str:
    """``retry`` (the default: send an interrupted prompt again unless the restarted agent
    kept its conversation) or ``report`` (never send it again; the command ends
    ``interrupted``)."""
    return "report" if metadata.get("interruptedTurns") == "report" else "retry"
