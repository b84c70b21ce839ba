"""Read queries, usable on any connection (the read engine, or the writer's own transaction)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Select, func, select

from state_machines import CommandState, SessionNotFound, SessionState
from state_machines.errors import CommandNotFound
from state_machines.event_kinds import EventKind
from store.ownership import owner_alive
from store.records import BindingRecord, CommandRecord, EventRecord, SessionRecord
from store.rows import binding_from_row, command_from_row, event_from_row, session_from_row
from store.schema import agent_capabilities as agent_capabilities_table
from store.schema import bindings, commands, delivery_checkpoints, events, sessions
from store.schema import session_usage as usage_table
from store.schema import store_identity as store_identity_table
from store.usage import BudgetStop, SessionUsage, Usage


def get_session(conn: Connection, session_id: str) -> SessionRecord:
    row = conn.execute(select(sessions).where(sessions.c.id == session_id)).first()
    if row is None:
        raise SessionNotFound(session_id)
    return session_from_row(row)


def session_by_key(conn: Connection, spawn_key: str) -> SessionRecord | None:
    row = conn.execute(select(sessions).where(sessions.c.spawn_key == spawn_key)).first()
    return None if row is None else session_from_row(row)


def session_id_for_acp(conn: Connection, acp_session_id: str) -> str | None:
    """The control-plane session that holds this agent-side ACP session id."""
    found: str | None = conn.execute(
        select(sessions.c.id).where(sessions.c.acp_session_id == acp_session_id)
    ).scalar_one_or_none()
    return found


def get_command(conn: Connection, command_id: str) -> CommandRecord:
    row = conn.execute(select(commands).where(commands.c.id == command_id)).first()
    if row is None:
        raise CommandNotFound(command_id)
    return command_from_row(row)


def sessions_query(
    state: SessionState | None = None, parent_id: str | None = None, after_id: str | None = None
) -> Select[tuple[object, ...]]:
    query = select(sessions).order_by(sessions.c.created_at, sessions.c.id)
    if state is not None:
        query = query.where(sessions.c.state == state.value)
    if parent_id is not None:
        query = query.where(sessions.c.parent_id == parent_id)
    if after_id is not None:
        # Cursor paging: resume strictly after the last session of the previous page.
        anchor = select(sessions.c.created_at).where(sessions.c.id == after_id).scalar_subquery()
        query = query.where(
            (sessions.c.created_at > anchor)
            | ((sessions.c.created_at == anchor) & (sessions.c.id > after_id))
        )
    return query


def list_sessions(
    conn: Connection,
    state: SessionState | None = None,
    parent_id: str | None = None,
    limit: int = 100,
    after_id: str | None = None,
) -> list[SessionRecord]:
    rows = conn.execute(sessions_query(state, parent_id, after_id).limit(limit))
    return [session_from_row(r) for r in rows]


def count_sessions_by_state(conn: Connection) -> dict[str, int]:
    rows = conn.execute(select(sessions.c.state, func.count()).group_by(sessions.c.state))
    return {str(state): int(n) for state, n in rows}


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


def commands_of(conn: Connection, session_id: str) -> list[CommandRecord]:
    rows = conn.execute(
        select(commands).where(commands.c.session_id == session_id).order_by(commands.c.seq)
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


def latest_event(conn: Connection, session_id: str, kinds: tuple[str, ...]) -> EventRecord | None:
    """The session's most recent event of one of ``kinds``."""
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


def agent_capabilities(conn: Connection, command_hash: str) -> dict[str, Any] | None:
    """What the agent command answered to ``initialize`` when it last started."""
    text = conn.execute(
        select(agent_capabilities_table.c.initialize).where(
            agent_capabilities_table.c.command_hash == command_hash
        )
    ).scalar_one_or_none()
    if text is None:
        return None
    value: dict[str, Any] = json.loads(text)
    return value


def store_identity(conn: Connection) -> str:
    """The store's random identity (migration 0007)."""
    return str(conn.execute(select(store_identity_table.c.id)).scalar_one())


def descendants(conn: Connection, session_id: str) -> list[str]:
    """Every session below ``session_id``, parents before their children."""
    found: list[str] = []
    frontier = [session_id]
    while frontier:
        children = list(
            conn.execute(
                select(sessions.c.id)
                .where(sessions.c.parent_id.in_(frontier))
                .order_by(sessions.c.created_at)
            ).scalars()
        )
        found.extend(children)
        frontier = children
    return found


def orphaned_sessions(conn: Connection, me: str, include_mine: bool) -> set[str]:
    """Sessions with work in flight whose owner is gone (or none; or this process, when it
    has just opened the store and so cannot be running anything yet)."""
    rows = conn.execute(
        select(sessions.c.id, sessions.c.owner).where(
            sessions.c.state.in_([SessionState.RUNNING.value, SessionState.CANCELLING.value])
            | sessions.c.id.in_(
                select(commands.c.session_id).where(commands.c.state == CommandState.RUNNING.value)
            )
        )
    ).all()
    return {
        r.id
        for r in rows
        if r.owner is None
        or (r.owner == me and include_mine)
        or (r.owner != me and not owner_alive(r.owner))
    }


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


def sessions_with_work(conn: Connection, me: str) -> list[str]:
    """Open sessions with work (queued commands, or still ``creating``) that no live process
    other than ``me`` owns, oldest first."""
    rows = conn.execute(
        select(sessions.c.id, sessions.c.owner)
        .where(
            sessions.c.state != SessionState.CLOSED.value,
            (sessions.c.state == SessionState.CREATING.value)
            | sessions.c.id.in_(
                select(commands.c.session_id).where(commands.c.state == CommandState.QUEUED.value)
            ),
        )
        .order_by(sessions.c.created_at)
    ).all()
    alive: dict[str, bool] = {}  # one /proc look-up per distinct owner, not per session

    def free(owner: str | None) -> bool:
        if owner is None or owner == me:
            return True
        if owner not in alive:
            alive[owner] = owner_alive(owner)
        return not alive[owner]

    return [r.id for r in rows if free(r.owner)]


def announced(conn: Connection, parent_id: str, command_id: str) -> bool:
    """Whether the child's run ``command_id`` was announced to the parent already."""
    count = conn.execute(
        select(func.count())
        .select_from(events)
        .where(
            events.c.session_id == parent_id,
            events.c.kind == EventKind.ANNOUNCE,
            func.json_extract(events.c.payload, "$.commandId") == command_id,
        )
    ).scalar_one()
    return bool(count)


def siblings_running(raw: sqlite3.Connection, session_id: str) -> int:
    """How many other children of this session's parent are in a turn (0 without a parent);
    on a driver connection (``Store.read_raw``): it runs before every child's agent start."""
    parent = raw.execute("SELECT parent_id FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if parent is None or parent[0] is None:
        return 0
    (count,) = raw.execute(
        "SELECT count(*) FROM sessions WHERE parent_id = ? AND id != ? AND state IN (?, ?)",
        (parent[0], session_id, SessionState.RUNNING.value, SessionState.CANCELLING.value),
    ).fetchone()
    return int(count)


def session_usage(conn: Connection, session_id: str) -> SessionUsage:
    """What the session's agent reported it used, and the budget that stopped it, if any."""
    row = conn.execute(select(usage_table).where(usage_table.c.session_id == session_id)).first()
    if row is None:
        return SessionUsage(session_id, Usage(), None)
    stopped = json.loads(row.stopped_by) if row.stopped_by else None
    return SessionUsage(
        session_id,
        Usage(row.input_tokens, row.output_tokens, row.total_tokens, row.cost_usd),
        None if stopped is None else BudgetStop(**stopped),
    )


def usage_sum(conn: Connection, session_ids: Sequence[str]) -> Usage:
    """The usage of several sessions together (a tree, a batch)."""
    total = Usage()
    for start in range(0, len(session_ids), 500):  # SQLite's bound-parameter limit
        row = conn.execute(
            select(
                func.coalesce(func.sum(usage_table.c.input_tokens), 0),
                func.coalesce(func.sum(usage_table.c.output_tokens), 0),
                func.coalesce(func.sum(usage_table.c.total_tokens), 0),
                func.coalesce(func.sum(usage_table.c.cost_usd), 0.0),
            ).where(usage_table.c.session_id.in_(session_ids[start : start + 500]))
        ).one()
        total = total + Usage(int(row[0]), int(row[1]), int(row[2]), float(row[3]))
    return total


def tree_root(conn: Connection, session_id: str) -> str:
    """The root of the session's tree (itself for a root)."""
    current = session_id
    while True:
        parent = conn.execute(
            select(sessions.c.parent_id).where(sessions.c.id == current)
        ).scalar_one_or_none()
        if parent is None:
            return current
        current = parent


def usage_totals(conn: Connection) -> tuple[Usage, int]:
    """Every session's usage together, and how many sessions a budget stopped."""
    row = conn.execute(
        select(
            func.coalesce(func.sum(usage_table.c.input_tokens), 0),
            func.coalesce(func.sum(usage_table.c.output_tokens), 0),
            func.coalesce(func.sum(usage_table.c.total_tokens), 0),
            func.coalesce(func.sum(usage_table.c.cost_usd), 0.0),
            func.count(usage_table.c.stopped_by),
        )
    ).one()
    return Usage(int(row[0]), int(row[1]), int(row[2]), float(row[3])), int(row[4])
