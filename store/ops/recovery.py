"""Recovery of work a dead (or restarted) owner left in flight."""

from __future__ import annotations

import json
import time
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
from store.ownership import this_owner
from store.queries import orphaned_sessions
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
        conn.execute(update(sessions).where(sessions.c.id.in_(orphaned)).values(owner=None))
    return RecoveryReport(tuple(requeued), tuple(failed), tuple(to_error))


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
