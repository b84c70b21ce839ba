"""Reads of the event log and of delivery bindings and their checkpoints."""

from __future__ import annotations

from sqlalchemy import Connection, Select, func, select

from state_machines.event_kinds import EventKind
from store.dialect_sql import json_text
from store.records import BindingRecord, EventRecord, SinkKind
from store.rows import binding_from_row, event_from_row
from store.schema import bindings, delivery_checkpoints, events, sessions


def events_query(session_id: str, after_seq: int, limit: int | None) -> Select[tuple[object, ...]]:
    query = (
        select(events)
        .where(events.c.session_id == session_id, events.c.seq > after_seq)
        .order_by(events.c.seq)
    )
    return query if limit is None else query.limit(limit)


def events_after(
    conn: Connection, session_id: str, after_seq: int = 0, limit: int | None = None
) -> list[EventRecord]:
    return [event_from_row(r) for r in conn.execute(events_query(session_id, after_seq, limit))]


def command_events(conn: Connection, session_id: str, command_id: str) -> list[EventRecord]:
    """The events one command produced, in order (a scan of the session's events: no hot
    path reads by command, so no index serves it; see migration 0004)."""
    query = (
        select(events)
        .where(events.c.session_id == session_id, events.c.command_id == command_id)
        .order_by(events.c.seq)
    )
    return [event_from_row(r) for r in conn.execute(query)]


def _bindings_select() -> Select[tuple[object, ...]]:
    return select(bindings, delivery_checkpoints.c.last_event_seq).join(
        delivery_checkpoints,
        delivery_checkpoints.c.binding_id == bindings.c.id,
        isouter=True,
    )


def get_binding(conn: Connection, binding_id: str) -> BindingRecord | None:
    row = conn.execute(_bindings_select().where(bindings.c.id == binding_id)).first()
    return None if row is None else binding_from_row(row)


def bindings_of(conn: Connection, session_id: str, active_only: bool = True) -> list[BindingRecord]:
    query = _bindings_select().where(bindings.c.session_id == session_id)
    if active_only:
        query = query.where(bindings.c.active.is_(True))
    return [binding_from_row(r) for r in conn.execute(query.order_by(bindings.c.bound_at))]


def undelivered_bindings(conn: Connection) -> list[BindingRecord]:
    """Bindings whose checkpoint trails their session's log (active or not: a binding
    deactivated by close still gets the events that were committed before it)."""
    query = (
        _bindings_select()
        .join(sessions, sessions.c.id == bindings.c.session_id)
        .where(func.coalesce(delivery_checkpoints.c.last_event_seq, 0) < sessions.c.last_event_seq)
    )
    return [binding_from_row(r) for r in conn.execute(query)]


def delivery_lag(conn: Connection) -> list[tuple[str, str, int]]:
    """(binding id, session id, events not delivered yet) of every binding that trails."""
    delivered = func.coalesce(delivery_checkpoints.c.last_event_seq, 0)
    query = (
        select(bindings.c.id, bindings.c.session_id, sessions.c.last_event_seq - delivered)
        .join(sessions, sessions.c.id == bindings.c.session_id)
        .join(
            delivery_checkpoints,
            delivery_checkpoints.c.binding_id == bindings.c.id,
            isouter=True,
        )
        .where(delivered < sessions.c.last_event_seq)
    )
    return [(str(b), str(s), int(n)) for b, s, n in conn.execute(query)]


def latest_event(conn: Connection, session_id: str, kinds: tuple[str, ...]) -> EventRecord | None:
    """The session's most recent event of one of ``kinds`` (of any kind when empty)."""
    query = select(events).where(events.c.session_id == session_id)
    if kinds:
        query = query.where(events.c.kind.in_(kinds))
    row = conn.execute(query.order_by(events.c.seq.desc()).limit(1)).first()
    return None if row is None else event_from_row(row)


def last_event_of_kinds(
    conn: Connection, session_id: str, kinds: tuple[str, ...]
) -> EventRecord | None:
    """The session's newest event of ``kinds``."""
    row = conn.execute(
        select(events)
        .where(events.c.session_id == session_id, events.c.kind.in_(kinds))
        .order_by(events.c.seq.desc())
        .limit(1)
    ).first()
    return None if row is None else event_from_row(row)


def events_of_kinds_after(
    conn: Connection, session_id: str, kinds: tuple[str, ...], after_seq: int
) -> list[EventRecord]:
    """The session's events of ``kinds`` after ``after_seq``, in order."""
    rows = conn.execute(
        select(events)
        .where(
            events.c.session_id == session_id,
            events.c.kind.in_(kinds),
            events.c.seq > after_seq,
        )
        .order_by(events.c.seq)
    ).all()
    return [event_from_row(r) for r in rows]


def announce_parent(conn: Connection, child_id: str) -> str | None:
    """The parent the child announces its runs to (its active binding of kind ``parent``),
    or None."""
    row = conn.execute(
        select(bindings.c.target).where(
            bindings.c.session_id == child_id,
            bindings.c.sink_kind == SinkKind.PARENT,
            bindings.c.active.is_(True),
        )
    ).first()
    return None if row is None else str(row[0])


def announced(conn: Connection, parent_id: str, command_id: str) -> bool:
    """Whether the child's run ``command_id`` was announced to the parent already."""
    count = conn.execute(
        select(func.count())
        .select_from(events)
        .where(
            events.c.session_id == parent_id,
            events.c.kind == EventKind.ANNOUNCE,
            json_text(conn, events.c.payload, "commandId") == command_id,
        )
    ).scalar_one()
    return bool(count)
