"""Announcing a child session's run outcomes to its parent, exactly once.

A child spawned with ``announce=True`` has a binding of kind ``parent``; its projector hands
the child's events to an ``AnnounceSink``. When they show that a run ended (``turn_ended``,
``turn_failed``, ``interrupted``, ``agent_start_failed``, ``closed``), the sink writes, in one
transaction, for every finished prompt of the child not announced yet: an ``announce`` event
in the parent's log (a ``custom_message`` in its transcript) and, by default, a follow-up
prompt for the parent whose idempotency key is derived from the child's run. A crash after
that commit but before the checkpoint moved re-delivers the events; the announce is found
and not repeated. A parent that is closed gets nothing (the child's result stays readable).

The status comes from the run's final state, never from the model's text:
completed -> ok, cancelled -> cancelled, failed by a turn timeout -> timeout, failed -> error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, func, select

from state_machines import CommandState, SessionState
from store import CommandKind, CommandRecord, EventRecord, NewEvent, Store, WriteContext, queries
from store import operations as ops
from store.faults import fault_point
from store.schema import events

TRIGGERS = frozenset(
    {"turn_ended", "turn_failed", "interrupted", "turn_interrupted", "agent_start_failed", "closed"}
)


def status_of(command: CommandRecord) -> str:
    if command.state is CommandState.COMPLETED:
        return "ok"
    if command.state is CommandState.CANCELLED:
        return "cancelled"
    if command.state is CommandState.INTERRUPTED:
        return "interrupted"
    if (command.error or "").startswith("timeout"):
        return "timeout"
    return "error"


def _announced(conn: Connection, parent_id: str, command_id: str) -> bool:
    count = conn.execute(
        select(func.count())
        .select_from(events)
        .where(
            events.c.session_id == parent_id,
            events.c.kind == "announce",
            func.json_extract(events.c.payload, "$.commandId") == command_id,
        )
    ).scalar_one()
    return bool(count)


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
        if _announced(conn, parent_id, command.id):
            continue
        payload = _announcement(child_id, command)
        ops.append_events(ctx, parent_id, None, [NewEvent("announce", payload)])
        if as_prompt:
            text = f"[subagent {child_id} finished: status={payload['status']}]\n{payload['text']}"
            ops.enqueue(
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


class AnnounceSink:
    def __init__(self, store: Store, child_id: str, parent_id: str, as_prompt: bool) -> None:
        self._store = store
        self.child_id = child_id
        self.parent_id = parent_id
        self.as_prompt = as_prompt
        self.parents_notified: list[str] = []  # parents that got new work (to wake them)

    def deliver(self, batch: Sequence[EventRecord]) -> None:
        if not any(e.kind in TRIGGERS for e in batch):
            return
        count = self._store.write(
            lambda ctx: announce_finished_runs(ctx, self.child_id, self.parent_id, self.as_prompt)
        )
        fault_point("announce.after_commit")
        if count and self.as_prompt:
            self.parents_notified.append(self.parent_id)

    def close(self) -> None:
        return None
