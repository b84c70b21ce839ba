"""Session writes: spawn (with its binding and first prompt, one transaction), bind,
close, the orphan sweep, and the agent capabilities cache."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from state_machines import (
    SESSION_MACHINE,
    IdempotencyConflict,
    SessionClosed,
    SessionEvent,
    SessionState,
)
from state_machines.errors import (
    LimitExceeded,
)
from state_machines.event_kinds import EventKind
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
from store.ops.commands import cancel_queued, refuse_if_stopped
from store.ops.events import insert_events
from store.placement import Placement
from store.records import (
    AgentSpec,
    BindingRecord,
    BindingSpec,
    CommandKind,
    CommandRecord,
    NewEvent,
    SessionRecord,
    SpawnResult,
    SubagentLimits,
)
from store.rows import command_from_row
from store.schema import bindings, commands, delivery_checkpoints, sessions
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
    if idempotency_key is not None:
        existing = conn.execute(
            select(sessions.c.id, sessions.c.request_hash).where(
                sessions.c.spawn_key == idempotency_key
            )
        ).first()
        if existing is not None:
            if existing.request_hash != digest and existing.request_hash != _legacy_spawn_hash(
                agent, request
            ):
                raise IdempotencyConflict(idempotency_key, "spawn", existing.id)
            return _existing_spawn(conn, existing.id)

    depth = 0
    if parent_id is not None:
        depth = _check_child_limits(conn, parent_id, limits or SubagentLimits())
        refuse_if_stopped(ctx, parent_id)  # a budget stopped the parent: no new children
    placement_json = None if placement is None else placement.to_json()
    if placement_json is None and parent_id is not None:
        placement_json = conn.execute(
            select(sessions.c.placement).where(sessions.c.id == parent_id)
        ).scalar_one_or_none()
    now = time.time()
    session_id = new_id()
    conn.execute(
        insert(sessions).values(
            id=session_id,
            spawn_key=idempotency_key,
            request_hash=digest,
            parent_id=parent_id,
            depth=depth,
            agent=compact_json(agent.to_json()),
            cwd=cwd,
            state=SESSION_MACHINE.initial.value,
            queue_mode=queue_mode,
            epoch=0,
            last_event_seq=0,
            last_command_seq=0,
            created_at=now,
            updated_at=now,
            metadata=compact_json(metadata or {}),
            placement=placement_json,
        )
    )
    notify_session(ctx, session_id)
    fault_point("spawn.after_session")
    binding_record: BindingRecord | None = None
    if binding is not None:
        binding_record = _bind(conn, session_id, binding, now)
    fault_point("spawn.after_binding")
    insert_events(
        ctx,
        session_id,
        None,
        [NewEvent(EventKind.SESSION_CREATED, {"agent": agent.to_json(), "cwd": cwd})],
    )
    command: CommandRecord | None = None
    if first_prompt is not None:
        command = insert_command(
            ctx, session_id, CommandKind.PROMPT, {"content": list(first_prompt)}, None, max_attempts
        )
    fault_point("spawn.after_command")
    return SpawnResult(queries.get_session(conn, session_id), binding_record, command, True)


def _legacy_spawn_hash(agent: AgentSpec, request: dict[str, Any]) -> str | None:
    """The digest a release that stored env values hashed for the same spawn (values in the
    agent spec): a batch rerun after an upgrade keeps matching its spawn keys."""
    if not agent.env:
        return None
    return request_hash("spawn", {**request, "agent": agent.legacy_json()})


def _check_child_limits(conn: Connection, parent_id: str, limits: SubagentLimits) -> int:
    parent = queries.get_session(conn, parent_id)
    if parent.state is SessionState.CLOSED:
        raise SessionClosed(parent_id)
    depth = parent.depth + 1
    if depth > limits.max_depth:
        raise LimitExceeded(
            "max_depth", limits.max_depth, f"a child of {parent_id} would be at depth {depth}"
        )
    open_children = int(
        conn.execute(
            select(func.count())
            .select_from(sessions)
            .where(
                sessions.c.parent_id == parent_id,
                sessions.c.state != SessionState.CLOSED.value,
            )
        ).scalar_one()
    )
    if open_children >= limits.max_children:
        raise LimitExceeded(
            "max_children",
            limits.max_children,
            f"session {parent_id} already has {open_children} open children",
        )
    return depth


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


def _bind(conn: Connection, session_id: str, spec: BindingSpec, now: float) -> BindingRecord:
    binding_id = new_id()
    conn.execute(
        insert(bindings).values(
            id=binding_id,
            session_id=session_id,
            sink_kind=spec.sink_kind.value,
            target=spec.target,
            active=True,
            bound_at=now,
        )
    )
    conn.execute(
        insert(delivery_checkpoints).values(binding_id=binding_id, last_event_seq=0, updated_at=now)
    )
    record = queries.get_binding(conn, binding_id)
    assert record is not None
    return record


def bind(ctx: WriteContext, session_id: str, spec: BindingSpec) -> BindingRecord:
    """Add a destination to a session; it receives the whole log from seq 1."""
    session = queries.get_session(ctx.conn, session_id)
    if session.state is SessionState.CLOSED:
        raise SessionClosed(session_id)
    return _bind(ctx.conn, session_id, spec, time.time())


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
