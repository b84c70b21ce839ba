"""Reads of sessions: one, a page, a tree, who owns what, what has work."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Select, func, select, tuple_

from state_machines import (
    SESSION_MACHINE,
    CommandState,
    SessionEvent,
    SessionNotFound,
    SessionState,
)
from store.placement import Placement, allowed
from store.queries.nodes import Liveness
from store.raw import RawConnection
from store.records import SessionRecord
from store.rows import session_from_row
from store.schema import agent_capabilities as agent_capabilities_table
from store.schema import commands, sessions
from store.schema import store_identity as store_identity_table


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


PageCursor = tuple[float, str]  # the last row's updated_at (as stored) and id


def sessions_page(
    conn: Connection,
    states: Sequence[SessionState],
    before: PageCursor | None,
    limit: int,
) -> tuple[list[SessionRecord], PageCursor | None]:
    """Newest updated first, ``limit`` at most, strictly after the cursor ``before``, and
    the cursor of the next page (None after the last). A range of ``ix_sessions_updated``
    read backwards, so any page costs its own rows. The cursor carries ``updated_at`` as
    stored: a record's datetime keeps microseconds only, and a rounded cursor would show a
    row twice or skip one."""
    query = select(sessions).order_by(sessions.c.updated_at.desc(), sessions.c.id.desc())
    if states:
        query = query.where(sessions.c.state.in_([s.value for s in states]))
    if before is not None:
        query = query.where(tuple_(sessions.c.updated_at, sessions.c.id) < tuple_(*before))
    rows = conn.execute(query.limit(limit)).all()
    cursor = (float(rows[-1].updated_at), str(rows[-1].id)) if len(rows) == limit else None
    return [session_from_row(r) for r in rows], cursor


def count_sessions_by_state(conn: Connection) -> dict[str, int]:
    rows = conn.execute(select(sessions.c.state, func.count()).group_by(sessions.c.state))
    return {str(state): int(n) for state, n in rows}


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
    liveness = Liveness(conn)
    return {
        r.id
        for r in rows
        if r.owner is None
        or (r.owner == me and include_mine)
        or (r.owner != me and not liveness.alive(r.owner))
    }


def _with_work(conn: Connection) -> Sequence[Any]:
    return conn.execute(
        select(sessions.c.id, sessions.c.owner, sessions.c.placement)
        .where(
            sessions.c.state != SessionState.CLOSED.value,
            (sessions.c.state == SessionState.CREATING.value)
            | sessions.c.id.in_(
                select(commands.c.session_id).where(commands.c.state == CommandState.QUEUED.value)
            ),
        )
        .order_by(sessions.c.created_at)
    ).all()


def sessions_with_work(
    conn: Connection, me: str, node_name: str | None = None, node_labels: Sequence[str] = ()
) -> list[str]:
    """Open sessions with work (queued commands, or still ``creating``) that no live process
    other than ``me`` owns, oldest first; with ``node_name``, only those whose placement
    allows this node (store/placement.py)."""
    liveness = Liveness(conn)
    return [
        r.id
        for r in _with_work(conn)
        if (r.owner is None or r.owner == me or not liveness.alive(r.owner))
        and (node_name is None or allowed(r.placement, node_name, node_labels))
    ]


def waiting_for_placement(conn: Connection) -> list[tuple[str, str]]:
    """Sessions with work that no live node may run (their placement names a node that is
    gone, or labels no live node has): ``(session id, what the placement asks)``."""
    liveness = Liveness(conn)
    live = liveness.live_nodes()
    waiting = []
    for r in _with_work(conn):
        placement = Placement.from_json(r.placement)
        if placement is None or (r.owner is not None and liveness.alive(r.owner)):
            continue
        if not any(placement.allows(n.name, n.labels) for n in live):
            waiting.append((r.id, placement.describe()))
    return waiting


def siblings_running(raw: RawConnection, session_id: str) -> int:
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


# A session in these states has nothing to claim now: one in a turn (the states a turn's
# end leaves from) ends it first and wakes its siblings then; a final one never runs again.
_CANNOT_START = tuple(
    sorted(SESSION_MACHINE.sources(SessionEvent.TURN_ENDED) | SESSION_MACHINE.final)
)
_SIBLINGS_WITH_QUEUED_WORK = (
    "SELECT s.id FROM sessions s WHERE s.parent_id = ? AND s.id != ? "
    f"AND s.state NOT IN ({', '.join('?' for _ in _CANNOT_START)}) "
    "AND EXISTS (SELECT 1 FROM commands c WHERE c.session_id = s.id AND c.state = ?)"
)


def siblings_with_queued_work(raw: RawConnection, session_id: str, parent_id: str) -> list[str]:
    """The other children of ``parent_id`` that have a queued command and could start a
    turn: the ones a ``max_running_children`` cap may be holding back. On a driver
    connection (``Store.read_raw``): it runs after every child's turn, and reads ids only."""
    params = (parent_id, session_id, *(s.value for s in _CANNOT_START), CommandState.QUEUED.value)
    return [row[0] for row in raw.execute(_SIBLINGS_WITH_QUEUED_WORK, params).fetchall()]


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
