"""Write operations. Each runs inside one transaction of the group-commit writer.

Every state change goes through a guarded UPDATE whose allowed set comes from the transition
tables (``UPDATE ... WHERE state IN (sources)``); a row count of zero means the guard refused,
and the operation raises ``IllegalTransition`` with the state it found.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from state_machines import (
    COMMAND_MACHINE,
    SESSION_MACHINE,
    CommandEvent,
    CommandState,
    IdempotencyConflict,
    SessionClosed,
    SessionEvent,
    SessionNotFound,
    SessionState,
)
from state_machines.errors import (
    CheckpointError,
    CommandNotFound,
    LimitExceeded,
    OwnedElsewhere,
    StaleEpoch,
)
from store import hot_sql as hot
from store import queries
from store.faults import fault_point
from store.hashing import canonical_payload, command_hash, request_hash
from store.ownership import owner_alive, this_owner
from store.records import (
    AgentSpec,
    BindingRecord,
    BindingSpec,
    CommandKind,
    CommandRecord,
    EnqueueResult,
    EventRecord,
    NewEvent,
    RecoveryReport,
    SessionRecord,
    SpawnResult,
    SubagentLimits,
)
from store.rows import command_from_row
from store.schema import bindings, commands, delivery_checkpoints, sessions
from store.writer import WriteContext

DEFAULT_MAX_ATTEMPTS = 3


def new_id() -> str:
    return str(uuid.uuid4())


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# -- sessions ------------------------------------------------------------------------------


_SESSION_TRANSITION_SQL: dict[tuple[tuple[str, ...], int, bool], str] = {}


def _raw(conn: Connection) -> Any:
    return conn.connection.driver_connection


def transition_session(
    conn: Connection,
    session_id: str,
    event: SessionEvent,
    epoch: int | None = None,
    **values: Any,
) -> SessionState:
    """Apply ``event`` to a session through the SQL guard; returns the new state.

    With ``epoch`` the write is fenced: it only applies while the session's epoch is still
    the caller's, else ``StaleEpoch``. (Fixed SQL on the driver: this runs several times per
    turn, see store/hot_sql.py for why.)
    """
    raw = _raw(conn)
    row = raw.execute(hot.SESSION_STATE, (session_id,)).fetchone()
    if row is None:
        raise SessionNotFound(session_id)
    target = SESSION_MACHINE.next_state(SessionState(row[0]), event, subject=session_id)
    allowed = sorted(
        s.value
        for s in SESSION_MACHINE.sources(event)
        if SESSION_MACHINE.transitions[(s, event)] == target
    )
    key = (tuple(values), len(allowed), epoch is not None)
    sql = _SESSION_TRANSITION_SQL.get(key)
    if sql is None:
        sets = ", ".join(f"{name} = ?" for name in ("state", "updated_at", *values))
        marks = ", ".join("?" for _ in allowed)
        fence = " AND epoch = ?" if epoch is not None else ""
        sql = f"UPDATE sessions SET {sets} WHERE id = ? AND state IN ({marks}){fence}"
        _SESSION_TRANSITION_SQL[key] = sql
    params: tuple[Any, ...] = (target.value, time.time(), *values.values(), session_id, *allowed)
    if epoch is not None:
        params = (*params, epoch)
    if raw.execute(sql, params).rowcount != 1:
        state, current_epoch = raw.execute(
            "SELECT state, epoch FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if epoch is not None and current_epoch != epoch:
            raise StaleEpoch(session_id, epoch)
        SESSION_MACHINE.next_state(SessionState(state), event, subject=session_id)  # raises
    return target


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
) -> SpawnResult:
    """Session row + binding + first command (+ ``session_created`` event): all or none.

    With ``parent_id`` the session is a child: the parent must be open, and ``limits``
    (depth, open children) are checked in this same transaction (``LimitExceeded``)."""
    conn = ctx.conn
    request = {
        "agent": agent.to_json(),
        "cwd": cwd,
        "binding": None if binding is None else binding.to_json(),
        "prompt": None if first_prompt is None else list(first_prompt),
        "parent": parent_id,
        "queueMode": queue_mode,
    }
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
    now = time.time()
    session_id = new_id()
    conn.execute(
        insert(sessions).values(
            id=session_id,
            spawn_key=idempotency_key,
            request_hash=digest,
            parent_id=parent_id,
            depth=depth,
            agent=_dumps(agent.to_json()),
            cwd=cwd,
            state=SESSION_MACHINE.initial.value,
            queue_mode=queue_mode,
            epoch=0,
            last_event_seq=0,
            last_command_seq=0,
            created_at=now,
            updated_at=now,
            metadata=_dumps(metadata or {}),
        )
    )
    fault_point("spawn.after_session")
    binding_record: BindingRecord | None = None
    if binding is not None:
        binding_record = _bind(conn, session_id, binding, now)
    fault_point("spawn.after_binding")
    _append(
        ctx, session_id, None, [NewEvent("session_created", {"agent": agent.to_json(), "cwd": cwd})]
    )
    command: CommandRecord | None = None
    if first_prompt is not None:
        command = _insert_command(
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


# -- commands ------------------------------------------------------------------------------


def _insert_command(
    ctx: WriteContext,
    session_id: str,
    kind: CommandKind,
    payload: dict[str, Any],
    idempotency_key: str | None,
    max_attempts: int,
    priority: int = 0,
) -> CommandRecord:
    raw = ctx.raw
    row = raw.execute(hot.NEXT_COMMAND_SEQ, (session_id,)).fetchone()
    if row is None:
        if raw.execute(hot.SESSION_STATE, (session_id,)).fetchone() is None:
            raise SessionNotFound(session_id)
        raise SessionClosed(session_id)
    now = time.time()
    payload_text, digest = canonical_payload(kind.value, payload)
    record = hot.queued_command_row(
        new_id(),
        session_id,
        row[0],
        kind.value,
        payload_text,
        idempotency_key,
        digest,
        priority,
        max_attempts,
        now,
    )
    raw.execute(hot.INSERT_COMMAND, record)
    return hot.command_from_tuple(record)


def queue_mode_of(ctx: WriteContext, session_id: str) -> str:
    """The session's queue mode (``SessionNotFound`` for an unknown id)."""
    row = ctx.raw.execute(hot.SESSION_QUEUE_MODE, (session_id,)).fetchone()
    if row is None:
        raise SessionNotFound(session_id)
    return str(row[0])


def find_by_key(ctx: WriteContext, session_id: str, key: str | None) -> str | None:
    """The id of the session's command with this idempotency key, if any."""
    if key is None:
        return None
    row = ctx.raw.execute(hot.COMMAND_BY_KEY, (session_id, key)).fetchone()
    return None if row is None else str(row[0])


def enqueue(
    ctx: WriteContext,
    session_id: str,
    kind: CommandKind,
    payload: dict[str, Any],
    idempotency_key: str | None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    priority: int = 0,
) -> EnqueueResult:
    """Queue a command at the session's next seq. A known key with the same kind and payload
    returns the original command (with its outcome once final); with another, a conflict.
    A closed session refuses new commands (``SessionClosed``)."""
    if idempotency_key is not None:
        row = ctx.raw.execute(hot.COMMAND_BY_KEY, (session_id, idempotency_key)).fetchone()
        if row is not None:
            if row[1] != request_hash(kind.value, payload):
                raise IdempotencyConflict(idempotency_key, f"session {session_id}", row[0])
            existing = hot.fetch_command(ctx.raw, row[0])
            assert existing is not None
            return EnqueueResult(hot.command_from_tuple(existing), created=False)
    command = _insert_command(
        ctx, session_id, kind, payload, idempotency_key, max_attempts, priority
    )
    fault_point("enqueue.after_insert")
    return EnqueueResult(command, created=True)


_TRANSITION_SQL: dict[tuple[tuple[str, ...], int], str] = {}


@functools.cache
def _command_event_guard(event: CommandEvent) -> tuple[CommandState, tuple[str, ...]]:
    """The event's target state and the states it may leave from (from the table)."""
    (target,) = COMMAND_MACHINE.targets(event)  # every command event has one target state
    return target, tuple(sorted(s.value for s in COMMAND_MACHINE.sources(event)))


def _transition_command(
    ctx: WriteContext, command_id: str, event: CommandEvent, **values: Any
) -> CommandRecord:
    """One guarded ``UPDATE ... RETURNING``; a refused guard reads the row to say why."""
    target, allowed = _command_event_guard(event)
    key = (tuple(values), len(allowed))
    sql = _TRANSITION_SQL.get(key)
    if sql is None:
        sql = _TRANSITION_SQL[key] = hot.transition_sql(key[0], key[1])
    params = (target.value, time.time(), *values.values(), command_id, *allowed)
    row = ctx.raw.execute(sql, params).fetchone()
    if row is None:
        current = hot.fetch_command(ctx.raw, command_id)
        if current is None:
            raise CommandNotFound(command_id)
        state = CommandState(current[hot.COMMAND_COLUMNS.index("state")])
        COMMAND_MACHINE.next_state(state, event, subject=command_id)  # raises
    record = hot.command_from_tuple(row)
    if target in COMMAND_MACHINE.final:
        ctx.finished_records.append(record)
    return record


def claim_next(ctx: WriteContext, session_id: str) -> CommandRecord | None:
    """Move the session's next queued command (highest priority, then lowest seq) to
    ``running``; each claim counts as an attempt."""
    now = time.time()
    row = ctx.raw.execute(hot.CLAIM_NEXT, (now, now, session_id)).fetchone()
    if row is None:
        if ctx.raw.execute(hot.SESSION_STATE, (session_id,)).fetchone() is None:
            raise SessionNotFound(session_id)  # unknown ids are an error, not "no work"
        return None
    return hot.command_from_tuple(row)


def complete(ctx: WriteContext, command_id: str, result: dict[str, Any]) -> CommandRecord:
    return _transition_command(
        ctx, command_id, CommandEvent.COMPLETE, result=_dumps(result), finished_at=time.time()
    )


def fail(
    ctx: WriteContext, command_id: str, error: str, result: dict[str, Any] | None = None
) -> CommandRecord:
    values: dict[str, Any] = {"error": error, "finished_at": time.time()}
    if result is not None:
        values["result"] = _dumps(result)
    return _transition_command(ctx, command_id, CommandEvent.FAIL, **values)


def interrupt_command(
    ctx: WriteContext, command_id: str, error: str, **values: Any
) -> CommandRecord:
    """A run a crash cut short that will not be sent again: final ``interrupted``."""
    return _transition_command(
        ctx, command_id, CommandEvent.INTERRUPT, error=error, finished_at=time.time(), **values
    )


def cancel_command(
    ctx: WriteContext, command_id: str, reason: str, result: dict[str, Any] | None = None
) -> CommandRecord:
    values: dict[str, Any] = {"error": reason, "finished_at": time.time()}
    if result is not None:
        values["result"] = _dumps(result)
    return _transition_command(ctx, command_id, CommandEvent.CANCEL, **values)


def cancel(ctx: WriteContext, session_id: str, include_queued: bool = False) -> SessionState:
    """Ask the running turn to stop (``running -> cancelling``); optionally cancel the queue.

    Idempotent: where no turn runs the table absorbs ``cancel``.
    """
    conn = ctx.conn
    before = queries.get_session(conn, session_id).state
    state = transition_session(conn, session_id, SessionEvent.CANCEL)
    if include_queued:
        _cancel_queued(ctx, session_id, "cancelled with the session's queue")
    if before is SessionState.RUNNING:
        _append(ctx, session_id, None, [NewEvent("cancel_requested", {})])
    return state


def _cancel_queued(
    ctx: WriteContext, session_id: str, reason: str, running_too: bool = False
) -> int:
    states = [CommandState.QUEUED.value] + ([CommandState.RUNNING.value] if running_too else [])
    ids = (
        ctx.conn.execute(
            select(commands.c.id).where(
                commands.c.session_id == session_id, commands.c.state.in_(states)
            )
        )
        .scalars()
        .all()
    )
    for command_id in ids:
        _transition_command(
            ctx, command_id, CommandEvent.CANCEL, error=reason, finished_at=time.time()
        )
    return len(ids)


def close(ctx: WriteContext, session_id: str, reason: str = "closed") -> SessionRecord:
    """Close for good: bindings deactivated, open commands cancelled, a final ``closed`` event.
    Closing a closed session changes nothing."""
    conn = ctx.conn
    if queries.get_session(conn, session_id).state is SessionState.CLOSED:
        return queries.get_session(conn, session_id)
    _append(ctx, session_id, None, [NewEvent("closed", {"reason": reason})])
    transition_session(conn, session_id, SessionEvent.CLOSE, closed_at=time.time())
    _cancel_queued(ctx, session_id, f"session closed: {reason}", running_too=True)
    conn.execute(update(bindings).where(bindings.c.session_id == session_id).values(active=False))
    return queries.get_session(conn, session_id)


# -- events and delivery -------------------------------------------------------------------


def _append(
    ctx: WriteContext,
    session_id: str,
    command_id: str | None,
    new: Sequence[NewEvent],
    refuse_closed: bool = False,
) -> list[EventRecord]:
    if not new:
        return []
    texts = [e.payload_text() for e in new]
    raw = ctx.raw
    row = raw.execute(hot.NEXT_EVENT_SEQ, (len(new), session_id)).fetchone()
    if row is None:
        raise SessionNotFound(session_id)
    last, state = row
    if refuse_closed and state == SessionState.CLOSED.value:
        raise SessionClosed(session_id)  # the savepoint undoes the seq bump
    first = last - len(new) + 1
    now = time.time()
    appended: list[EventRecord] = []
    for i, (event, text) in enumerate(zip(new, texts, strict=True)):
        params = (session_id, first + i, command_id, event.kind, text, now)
        (event_id,) = raw.execute(hot.INSERT_EVENT, params).fetchone()
        appended.append(
            hot.event_record(event_id, session_id, first + i, command_id, event.kind, text, now)
        )
    frames = [(e.kind, e.raw, None) for e in appended]
    ctx.appended.append((session_id, first, command_id, frames, now))
    return appended


def append_events(
    ctx: WriteContext, session_id: str, command_id: str | None, new: Sequence[NewEvent]
) -> list[EventRecord]:
    """Append at the next per-session seqs (strictly increasing, no gaps). A closed
    session's log is final (``SessionClosed``)."""
    return _append(ctx, session_id, command_id, new, refuse_closed=True)


def append_frames(
    ctx: WriteContext,
    session_id: str,
    command_id: str | None,
    new: Sequence[tuple[str, str, Any]],
) -> int:
    """The recorder's path: ``(kind, JSON text, parsed)`` frames the caller already parsed
    (the raw tap did; ``parsed`` may be None and is only handed on to the session feeds),
    appended with one ``executemany`` and no records built. Returns the last seq."""
    if not new:
        return 0
    raw = ctx.raw
    row = raw.execute(hot.NEXT_EVENT_SEQ, (len(new), session_id)).fetchone()
    if row is None:
        raise SessionNotFound(session_id)
    last, state = row
    if state == SessionState.CLOSED.value:
        raise SessionClosed(session_id)
    first = last - len(new) + 1
    now = time.time()
    raw.executemany(
        hot.INSERT_EVENT_NO_RETURN,
        [
            (session_id, first + i, command_id, kind, text, now)
            for i, (kind, text, _) in enumerate(new)
        ],
    )
    ctx.appended.append((session_id, first, command_id, new, now))
    return int(last)


_CHECKPOINT_POSITION = (
    "SELECT cp.last_event_seq, s.last_event_seq FROM delivery_checkpoints cp "
    "JOIN bindings b ON b.id = cp.binding_id JOIN sessions s ON s.id = b.session_id "
    "WHERE cp.binding_id = ?"
)
_CHECKPOINT_MOVE = (
    "UPDATE delivery_checkpoints SET last_event_seq = ?, updated_at = ? WHERE binding_id = ?"
)


def advance_checkpoint(ctx: WriteContext, binding_id: str, seq: int) -> int:
    """Record that the binding's sink accepted every event up to ``seq``: never backwards,
    never past the last committed event."""
    row = ctx.raw.execute(_CHECKPOINT_POSITION, (binding_id,)).fetchone()
    if row is None:
        raise CheckpointError(binding_id, -1, seq, -1)
    current, last = int(row[0]), int(row[1])
    if seq < current or seq > last:
        raise CheckpointError(binding_id, current, seq, last)
    if seq > current:
        ctx.raw.execute(_CHECKPOINT_MOVE, (seq, time.time(), binding_id))
    return seq


# -- session trees -------------------------------------------------------------------------


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
        close(ctx, session_id, "parent session closed")
    return orphans


# -- ownership -----------------------------------------------------------------------------


def acquire(ctx: WriteContext, session_id: str, me: str) -> int:
    """Make ``me`` the session's owner; returns the fencing epoch to carry in its writes.

    Taking over from a dead owner raises the epoch, so writes still in flight from the old
    owner are refused (``StaleEpoch``). A live other owner: ``OwnedElsewhere``."""
    session = queries.get_session(ctx.conn, session_id)
    if session.owner == me:
        return session.epoch
    if session.owner is not None and owner_alive(session.owner):
        raise OwnedElsewhere(session_id, session.owner)
    # Taken over before a sweep recovered it: what the dead owner left mid-turn is
    # recovered here, in the same transaction, so no turn starts on a session still
    # marked running (and no command stays running with nobody running it).
    recover_sessions(ctx, {session_id})
    epoch = session.epoch + 1
    ctx.conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id, sessions.c.epoch == session.epoch)
        .values(owner=me, epoch=epoch, updated_at=time.time())
    )
    return epoch


def release(ctx: WriteContext, session_id: str, me: str) -> None:
    ctx.conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id, sessions.c.owner == me)
        .values(owner=None, agent_process=None)  # its owner stopped the agent first
    )


def refund_attempts(
    ctx: WriteContext, session_id: str, epoch: int, command_ids: Sequence[str]
) -> None:
    """An orderly shutdown (Ctrl-C, close) stopped these running commands mid-turn: that is
    the user's choice, not the command failing, so the attempt is given back. They stay
    ``running`` for the next open's recovery to requeue (or report) as after a crash; only a
    crash or a kill counts against ``max_attempts``, so a command that kills its process
    every time still ends ``failed``."""
    check_epoch(ctx.conn, session_id, epoch)
    ctx.conn.execute(
        update(commands)
        .where(
            commands.c.id.in_(list(command_ids)),
            commands.c.session_id == session_id,
            commands.c.state == CommandState.RUNNING.value,
            commands.c.attempts > 0,
        )
        .values(attempts=commands.c.attempts - 1)
    )


def check_epoch(conn: Connection, session_id: str, epoch: int) -> None:
    """Refuse a write from an owner that lost the session (run first in its transaction)."""
    raw = conn.connection.driver_connection
    assert raw is not None
    row = raw.execute("SELECT epoch FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if row is None:
        raise SessionNotFound(session_id)
    if row[0] != epoch:
        raise StaleEpoch(session_id, epoch)


# -- recovery ------------------------------------------------------------------------------


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
            _transition_command(ctx, cmd.id, CommandEvent.REQUEUE)
            requeued.append(cmd.id)
        else:
            _transition_command(
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
        _append(
            ctx,
            cmd.session_id,
            cmd.id,
            [
                NewEvent(
                    "interrupted",
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


def record_agent_capabilities(
    ctx: WriteContext, command: Sequence[str], initialize: dict[str, Any]
) -> None:
    """Remember what an agent command answered to ``initialize`` (its capabilities, auth
    methods and info: nothing secret), replacing an older answer."""
    ctx.raw.execute(
        "INSERT INTO agent_capabilities (command_hash, initialize, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT (command_hash) DO UPDATE SET initialize = excluded.initialize, "
        "updated_at = excluded.updated_at",
        (command_hash(tuple(command)), _dumps(initialize), time.time()),
    )


def count_queued(conn: Connection) -> int:
    return int(
        conn.execute(
            select(func.count())
            .select_from(commands)
            .where(commands.c.state == CommandState.QUEUED.value)
        ).scalar_one()
    )


__all__ = [
    "acquire",
    "advance_checkpoint",
    "append_events",
    "append_frames",
    "bind",
    "cancel",
    "cancel_command",
    "check_epoch",
    "claim_next",
    "close",
    "close_orphans",
    "complete",
    "count_queued",
    "descendants",
    "enqueue",
    "fail",
    "find_by_key",
    "interrupt_command",
    "interrupted_turns_policy",
    "new_id",
    "orphaned_sessions",
    "queue_mode_of",
    "record_agent_capabilities",
    "recover",
    "recover_sessions",
    "refund_attempts",
    "release",
    "spawn",
    "transition_session",
]
