"""Reads of commands: one, a session's, the next queued, counts."""

from __future__ import annotations

import json

from sqlalchemy import Connection, func, select

from state_machines import COMMAND_MACHINE, CommandState
from state_machines.errors import CommandNotFound
from state_machines.event_kinds import EventKind
from store.records import CommandRecord
from store.rows import command_from_row
from store.schema import commands, events


def get_command(conn: Connection, command_id: str) -> CommandRecord:
    row = conn.execute(select(commands).where(commands.c.id == command_id)).first()
    if row is None:
        raise CommandNotFound(command_id)
    return command_from_row(row)


def commands_of(conn: Connection, session_id: str) -> list[CommandRecord]:
    rows = conn.execute(
        select(commands).where(commands.c.session_id == session_id).order_by(commands.c.seq)
    )
    return [command_from_row(r) for r in rows]


def finished_since(conn: Connection, session_id: str, since: float) -> list[CommandRecord]:
    """The session's commands that reached a final state at or after ``since``."""
    final = [s.value for s in COMMAND_MACHINE.final]
    rows = conn.execute(
        select(commands)
        .where(
            commands.c.session_id == session_id,
            commands.c.state.in_(final),
            commands.c.finished_at >= since,
        )
        .order_by(commands.c.finished_at)
    )
    return [command_from_row(r) for r in rows]


def next_queued(conn: Connection, session_id: str) -> CommandRecord | None:
    row = conn.execute(
        select(commands)
        .where(commands.c.session_id == session_id, commands.c.state == CommandState.QUEUED)
        .order_by(commands.c.priority.desc(), commands.c.seq)
        .limit(1)
    ).first()
    return None if row is None else command_from_row(row)


def interrupted_counts(conn: Connection) -> dict[str, int]:
    """How many runs were interrupted so far, retried and failed after their budget."""
    rows = conn.execute(
        select(events.c.payload).where(events.c.kind == EventKind.INTERRUPTED)
    ).scalars()
    retried = sum(1 for raw in rows if json.loads(raw).get("willRetry"))
    total = int(
        conn.execute(
            select(func.count()).select_from(events).where(events.c.kind == EventKind.INTERRUPTED)
        ).scalar_one()
    )
    return {"total": total, "retried": retried, "failed": total - retried}


def count_commands(conn: Connection, state: CommandState) -> int:
    return int(
        conn.execute(
            select(func.count()).select_from(commands).where(commands.c.state == state.value)
        ).scalar_one()
    )
