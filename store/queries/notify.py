"""Reads for webhooks (``actors/delivery/webhook.py``): events of some kinds after a hook's
checkpoint, store-wide and in id order, with what a notification says about their session;
the log's end; the hook's checkpoint row; and how long its oldest pending event has waited.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, select

from store.dialect_sql import is_postgres
from store.queries.nodes import Liveness
from store.records import EventRecord
from store.rows import event_from_row
from store.schema import events, notify_checkpoints, sessions


@dataclass(frozen=True)
class NotifyEvent:
    """An event and the few facts of its session a notification carries."""

    event: EventRecord
    agent: str | None  # the agent's name as spawned
    parent_id: str | None
    metadata: dict[str, Any]  # the session's (batch and task ids, when a batch spawned it)


def last_event_id(conn: Connection) -> int:
    """The newest event id committed (every lower id is committed too on SQLite, whose one
    writer takes ids in commit order; on PostgreSQL a lower one may still be in flight)."""
    return int(conn.execute(select(func.coalesce(func.max(events.c.id), 0))).scalar_one())


def event_ids_after(conn: Connection, after_id: int, limit: int) -> list[int]:
    """The ids after ``after_id`` in order (PostgreSQL: where the gaps are)."""
    query = select(events.c.id).where(events.c.id > after_id).order_by(events.c.id).limit(limit)
    return [int(i) for i in conn.execute(query).scalars()]


def notify_events(
    conn: Connection, after_id: int, upto_id: int, kinds: Collection[str], limit: int
) -> list[NotifyEvent]:
    """Events of ``kinds`` with ``after_id < id <= upto_id``, oldest first."""
    query = (
        select(events, sessions.c.agent, sessions.c.parent_id, sessions.c.metadata)
        .join(sessions, sessions.c.id == events.c.session_id)
        .where(events.c.id > after_id, events.c.id <= upto_id, events.c.kind.in_(list(kinds)))
        .order_by(events.c.id)
        .limit(limit)
    )
    found = []
    for row in conn.execute(query):
        agent = _json(row.agent).get("name")
        found.append(
            NotifyEvent(
                event_from_row(row),
                agent if isinstance(agent, str) else None,
                row.parent_id,
                _json(row.metadata),
            )
        )
    return found


def pending(
    conn: Connection,
    after_id: int,
    kinds: Collection[str],
    limit: int,
    gap_settled: Callable[[int], bool],
) -> tuple[list[NotifyEvent], int]:
    """The next events of ``kinds`` after ``after_id`` up to the horizon, and the horizon:
    the highest id below which every id is settled, in one snapshot. On SQLite every
    committed id is (its one writer takes ids in commit order). On PostgreSQL an id is taken
    before its transaction commits: the horizon stops before the first gap in the ids,
    unless ``gap_settled(first missing id)`` says it has waited long enough to be a
    rolled-back transaction's (the caller keeps that time)."""
    if is_postgres(conn):
        expected = after_id + 1
        for event_id in event_ids_after(conn, after_id, 2048):
            if event_id != expected and not gap_settled(expected):
                break
            expected = event_id + 1
        horizon = expected - 1
    else:
        horizon = last_event_id(conn)
    if horizon <= after_id:
        return [], after_id
    return notify_events(conn, after_id, horizon, kinds, limit), horizon


def hook_lag(
    conn: Connection, hook: str, cursor: int | None, kinds: Collection[str]
) -> float | None:
    """When the first event of ``kinds`` past the hook's checkpoint (``cursor``, if this
    process holds it and is further on) was appended; None when caught up."""
    at = hook_checkpoint(conn, hook)
    if cursor is None:
        cursor = at
    return None if cursor is None else oldest_pending(conn, cursor, kinds)


def oldest_pending(conn: Connection, after_id: int, kinds: Collection[str]) -> float | None:
    """When the first event of ``kinds`` after ``after_id`` was appended (None: caught up)."""
    query = select(func.min(events.c.created_at)).where(
        events.c.id > after_id, events.c.kind.in_(list(kinds))
    )
    value = conn.execute(query).scalar_one()
    return None if value is None else float(value)


def hook_checkpoint(conn: Connection, hook: str) -> int | None:
    """The hook's last accepted event id (None: never delivered in this store)."""
    value = conn.execute(
        select(notify_checkpoints.c.last_event_id).where(notify_checkpoints.c.hook == hook)
    ).scalar_one_or_none()
    return None if value is None else int(value)


def held_elsewhere(conn: Connection, hook: str, owner: str) -> bool:
    """Another live process delivers the hook (a read, so a process that waits its turn
    writes nothing while it waits)."""
    holder = conn.execute(
        select(notify_checkpoints.c.owner).where(notify_checkpoints.c.hook == hook)
    ).scalar_one_or_none()
    return holder not in (None, owner) and Liveness(conn).alive(holder)


def _json(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}
