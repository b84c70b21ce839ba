"""Session writes: spawn (with its binding and first prompt, one transaction), bind,
close, the orphan sweep, and the agent capabilities cache."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, select, update

from state_machines import (
    SESSION_MACHINE,
    IdempotencyConflict,
    SessionClosed,
    SessionEvent,
    SessionNotFound,
    SessionState,
)
from state_machines.errors import (
    LimitExceeded,
)
from state_machines.event_kinds import EventKind
from store import hot_sql as hot
from store import queries
from store.faults import fault_point
from store.hashing import command_hash, request_hash
from store.ops._shared import (
    DEFAULT_MAX_ATTEMPTS,
    compact_json,
    insert_command,
    new_id,
    notify_session,
    transition_session,
)
from store.ops.commands import cancel_queued, raise_if_stopped
from store.ops.events import insert_events
from store.placement import Placement
from store.raw import RawConnection
from store.records import (
    AgentSpec,
    BindingRecord,
    BindingSpec,
    CommandKind,
    CommandRecord,
    NewEvent,
    SessionRecord,
    SinkKind,
    SpawnResult,
    SubagentLimits,
    utc,
)
from store.rows import command_from_row, session_from_mapping
from store.schema import bindings, commands, sessions
from store.writer import WriteContext


def spawn(
    ctx: WriteContext,
    agent: AgentSpec,
    cwd: str,
    binding: BindingSpec | None,
    first_prompt: Sequence[dict[str, Any]] | None,
    idempotency_key: str | None,
    parent_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    queue_mode: str = "followup",
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    limits: SubagentLimits | None = None,
    placement: Placement | None = None,
) -> SpawnResult:
    """Session row + binding + first command (+ ``session_created`` event): all or none.

    With ``parent_id`` the session is a child: the parent must be open, and ``limits``
    (depth, open children) are checked in this same transaction (``LimitExceeded``). A
    child without a placement of its own gets its parent's: it works in the parent's
    files, which are where the parent runs."""
    conn = ctx.conn
    request: dict[str, Any] = {
        "agent": agent.to_json(),
        "cwd": cwd,
        "binding": None if binding is None else binding.to_json(),
        "prompt": None if first_prompt is None else list(first_prompt),
        "parent": parent_id,
        "queueMode": queue_mode,
    }
    if placement is not None:  # only then: the hashes of earlier spawns stay what they were
        request["placement"] = placement.to_json()
    digest = request_hash("spawn", request)
    raw = ctx.raw
    if idempotency_key is not None:
        existing = raw.execute(hot.SESSION_BY_SPAWN_KEY, (idempotency_key,)).fetchone()
        if existing is not None:
            existing_id, existing_hash = existing
            if existing_hash != digest and existing_hash != _legacy_spawn_hash(agent, request):
                raise IdempotencyConflict(idempotency_key, "spawn", existing_id)
            return _existing_spawn(conn, existing_id)

    depth = 0
    placement_json = None if placement is None else placement.to_json()
    if parent_id is not None:
        depth, parent_placement = _check_parent(raw, parent_id, limits or SubagentLimits())
        if placement_json is None:
            placement_json = parent_placement
    # Fixed SQL, and the records built here rather than read back: the spawn is on the path
    # of every subagent (see store/hot_sql.py for what a Core statement costs).
    now = time.time()
    session_id = new_id()
    agent_json = agent.to_json()
    row: dict[str, Any] = {
        "id": session_id,
        "spawn_key": idempotency_key,
        "request_hash": digest,
        "parent_id": parent_id,
        "depth": depth,
        "agent": compact_json(agent_json),  # names of env variables, never values
        "cwd": cwd,
        "state": SESSION_MACHINE.initial.value,
        "queue_mode": queue_mode,
        "acp_session_id": None,
        "owner": None,
        "epoch": 0,
        "last_event_seq": 0,
        "last_command_seq": 0,
        "created_at": now,
        "updated_at": now,
        "closed_at": None,
        "last_error": None,
        "metadata": compact_json(metadata or {}),
        "agent_process": None,
        "placement": placement_json,
    }
    raw.execute(hot.INSERT_SESSION, _in_order(hot.SESSION_COLUMNS, **row))
    notify_session(ctx, session_id)
    fault_point("spawn.after_session")
    binding_record: BindingRecord | None = None
    if binding is not None:
        # The announce sink acts only on a run's end: its checkpoint starts past the
        # ``session_created`` event below (seq 1), so a spawn needs no delivery pass.
        delivered = 1 if binding.sink_kind is SinkKind.PARENT else 0
        binding_record = _bind(ctx, session_id, binding, now, delivered)
    fault_point("spawn.after_binding")
    (created,) = insert_events(
        ctx,
        session_id,
        None,
        [NewEvent(EventKind.SESSION_CREATED, {"agent": agent_json, "cwd": cwd})],
    )
    command: CommandRecord | None = None
    if first_prompt is not None:
        command = insert_command(
            ctx, session_id, CommandKind.PROMPT, {"content": list(first_prompt)}, None, max_attempts
        )
    fault_point("spawn.after_command")
    # The record from the values just inserted, as a read would convert them.
    session = session_from_mapping({**row, "last_event_seq": created.seq})
    return SpawnResult(session, binding_record, command, True)


def _legacy_spawn_hash(agent: AgentSpec, request: dict[str, Any]) -> str | None:
    """The digest a release that stored env values hashed for the same spawn (values in the
    agent spec): a batch rerun after an upgrade keeps matching its spawn keys."""
    if not agent.env:
        return None
    return request_hash("spawn", {**request, "agent": agent.legacy_json()})


def _check_parent(
    raw: RawConnection, parent_id: str, limits: SubagentLimits
) -> tuple[int, str | None]:
    """A new child's depth and its parent's placement, after the checks on the parent (in
    this order): it exists, it is open, the depth and open-children limits
    (``LimitExceeded``), and no budget stopped it (``BudgetExceeded``)."""
    row = raw.execute(hot.PARENT_OF_CHILD, (parent_id,)).fetchone()
    if row is None:
        raise SessionNotFound(parent_id)
    state, parent_depth, placement_json, open_children, stopped_by = row
    if state == SessionState.CLOSED.value:
        raise SessionClosed(parent_id)
    depth = parent_depth + 1
    if depth > limits.max_depth:
        raise LimitExceeded(
            "max_depth", limits.max_depth, f"a child of {parent_id} would be at depth {depth}"
        )
    if open_children >= limits.max_children:
        raise LimitExceeded(
            "max_children",
            limits.max_children,
            f"session {parent_id} already has {open_children} open children",
        )
    raise_if_stopped(parent_id, stopped_by)  # a budget stopped the parent: no new children
    return depth, placement_json


def _existing_spawn(conn: Connection, session_id: str) -> SpawnResult:
    session = queries.get_session(conn, session_id)
    first = conn.execute(
        select(commands)
        .where(commands.c.session_id == session_id)
        .order_by(commands.c.seq)
        .limit(1)
    ).first()
    bound = queries.bindings_of(conn, session_id, active_only=False)
    return SpawnResult(
        session,
        bound[0] if bound else None,
        None if first is None else command_from_row(first),
        False,
    )


def _bind(
    ctx: WriteContext, session_id: str, spec: BindingSpec, now: float, delivered: int = 0
) -> BindingRecord:
    """The binding and its checkpoint at ``delivered`` (the seq delivered up to)."""
    binding_id = new_id()
    ctx.raw.execute(
        hot.INSERT_BINDING,
        _in_order(
            hot.BINDING_COLUMNS,
            id=binding_id,
            session_id=session_id,
            sink_kind=spec.sink_kind.value,
            target=spec.target,
            active=True,
            bound_at=now,
            expires_at=None,
        ),
    )
    ctx.raw.execute(
        hot.INSERT_CHECKPOINT,
        _in_order(
            hot.CHECKPOINT_COLUMNS, binding_id=binding_id, last_event_seq=delivered, updated_at=now
        ),
    )
    record = BindingRecord(
        binding_id, session_id, spec.sink_kind, spec.target, True, delivered, utc(now)
    )
    ctx.bound.append(record)
    return record


def _in_order(columns: tuple[str, ...], **values: Any) -> tuple[Any, ...]:
    """An insert's parameters in the table's column order. Every column must be named: a
    column added to the table without a value here is a ``KeyError`` at the first insert,
    not a silent default."""
    return tuple(values[name] for name in columns)


def bind(ctx: WriteContext, session_id: str, spec: BindingSpec) -> BindingRecord:
    """Add a destination to a session; it receives the whole log from seq 1."""
    session = queries.get_session(ctx.conn, session_id)
    if session.state is SessionState.CLOSED:
        raise SessionClosed(session_id)
    return _bind(ctx, session_id, spec, time.time())


def close_session(ctx: WriteContext, session_id: str, reason: str = "closed") -> SessionRecord:
    """Close for good: bindings deactivated, open commands cancelled, a final ``closed`` event.
    Closing a closed session changes nothing."""
    conn = ctx.conn
    if queries.get_session(conn, session_id).state is SessionState.CLOSED:
        return queries.get_session(conn, session_id)
    insert_events(ctx, session_id, None, [NewEvent(EventKind.CLOSED, {"reason": reason})])
    transition_session(conn, session_id, SessionEvent.CLOSE, closed_at=time.time())
    cancel_queued(ctx, session_id, f"session closed: {reason}", running_too=True)
    conn.execute(update(bindings).where(bindings.c.session_id == session_id).values(active=False))
    notify_session(ctx, session_id)  # its owner, maybe on another node, stops the agent
    return queries.get_session(conn, session_id)


def close_sessions(ctx: WriteContext, session_ids: Sequence[str], reason: str) -> None:
    """``close_session`` for each, in order (parents before children), in one transaction."""
    for session_id in session_ids:
        close_session(ctx, session_id, reason)


def close_orphans(ctx: WriteContext) -> list[str]:
    """Open sessions whose parent is closed (a crash between closing a parent and its
    children): closed now, as the cascade would have."""
    parent = sessions.alias("parent")
    orphans = list(
        ctx.conn.execute(
            select(sessions.c.id)
            .join(parent, parent.c.id == sessions.c.parent_id)
            .where(
                parent.c.state == SessionState.CLOSED.value,
                sessions.c.state != SessionState.CLOSED.value,
            )
        ).scalars()
    )
    for session_id in orphans:
        close_session(ctx, session_id, "parent session closed")
    return orphans


def record_agent_capabilities(
    ctx: WriteContext, command: Sequence[str], initialize: dict[str, Any]
) -> None:
    """Remember what an agent command answered to ``initialize`` (its capabilities, auth
    methods and info: nothing secret), replacing an older answer."""
    ctx.raw.execute(
        "INSERT INTO agent_capabilities (command_hash, initialize, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT (command_hash) DO UPDATE SET initialize = excluded.initialize, "
        "updated_at = excluded.updated_at",
        (command_hash(tuple(command)), compact_json(initialize), time.time()),
    )
