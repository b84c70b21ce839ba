"""What every write operation shares: ids, compact JSON, the guarded transitions of
sessions and commands (their allowed sets come from the transition tables: ``UPDATE ...
WHERE state IN (sources)``; a row count of zero means the guard refused, and the operation
raises ``IllegalTransition`` with the state it found), and the insert of a command."""

from __future__ import annotations

import functools
import json
import os
import time
from typing import Any

from sqlalchemy import Connection

from state_machines import (
    COMMAND_MACHINE,
    SESSION_MACHINE,
    CommandEvent,
    CommandState,
    SessionClosed,
    SessionEvent,
    SessionNotFound,
    SessionState,
)
from state_machines.errors import (
    CommandNotFound,
    StaleEpoch,
)
from store import hot_sql as hot
from store.hashing import canonical_payload
from store.raw import PgRaw, RawConnection, raw_for
from store.records import (
    CommandKind,
    CommandRecord,
)
from store.writer import WriteContext

DEFAULT_MAX_ATTEMPTS = 3


def new_id() -> str:
    """A random (version 4) UUID's text, as ``str(uuid.uuid4())`` writes it, without the
    ``UUID`` object: 4.1 -> 1.7 µs here, and every command and session takes one."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # the RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_SESSION_TRANSITION_SQL: dict[tuple[tuple[str, ...], int, bool, str | None, bool], str] = {}


def _sources_to(event: SessionEvent, target: SessionState) -> tuple[str, ...]:
    """The states ``event`` leaves from to reach ``target`` (the guard's allowed set)."""
    return tuple(
        sorted(
            s.value
            for s in SESSION_MACHINE.sources(event)
            if SESSION_MACHINE.transitions[(s, event)] == target
        )
    )


@functools.cache
def _one_target_guard(event: SessionEvent) -> tuple[SessionState, tuple[str, ...]] | None:
    """For an event with one target state in the table (a turn's start and end, close), the
    target and its sources: the guarded UPDATE needs no read of the state before it (a
    statement less on every turn). None when the target depends on the state (cancel)."""
    targets = SESSION_MACHINE.targets(event)
    if len(targets) != 1:
        return None
    (target,) = targets
    return target, _sources_to(event, target)


def driver_of(conn: Connection) -> RawConnection:
    return raw_for(conn)


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
    return _transition(driver_of(conn), session_id, event, epoch, values, None)[0]


def start_turn_with_event(raw: RawConnection, session_id: str, epoch: int) -> int:
    """``TURN_STARTED`` for the owner at ``epoch``, with the seq of the turn's ``prompt``
    event taken by the same statement (the session's row updated once, not twice); returns
    that seq. The caller inserts the event at it (``events.write_event``)."""
    _, row = _transition(
        raw, session_id, SessionEvent.TURN_STARTED, epoch, {}, "last_event_seq", event_seqs=True
    )
    return int(row[0])


def end_turn_with_event(raw: RawConnection, session_id: str, epoch: int) -> tuple[int, bool]:
    """``TURN_ENDED`` for the owner at ``epoch``, with the seq of the turn's ``turn_ended``
    event and whether a command is queued for the session read by the same statement (a
    turn's end needs all three): ``(that seq, queued)``."""
    _, row = _transition(
        raw,
        session_id,
        SessionEvent.TURN_ENDED,
        epoch,
        {},
        f"last_event_seq, {hot.HAS_QUEUED_HERE}",
        event_seqs=True,
    )
    return int(row[0]), bool(row[1])


def _transition(
    raw: RawConnection,
    session_id: str,
    event: SessionEvent,
    epoch: int | None,
    values: dict[str, Any],
    returning: str | None,
    event_seqs: bool = False,
) -> tuple[SessionState, Any]:
    """The guarded UPDATE of ``transition_session``; with ``returning``, also what that
    expression gives for the updated row. ``event_seqs``: the same UPDATE takes one event
    seq (``last_event_seq`` + 1) for an event the caller appends in this transaction."""
    guard = _one_target_guard(event)
    if guard is None:  # the target depends on the state: read it first
        row = raw.execute(hot.SESSION_STATE, (session_id,)).fetchone()
        if row is None:
            raise SessionNotFound(session_id)
        target = SESSION_MACHINE.next_state(SessionState(row[0]), event, subject=session_id)
        allowed = _sources_to(event, target)
    else:  # the guard alone decides; a refusal reads the row below to say why
        target, allowed = guard
    key = (tuple(values), len(allowed), epoch is not None, returning, event_seqs)
    sql = _SESSION_TRANSITION_SQL.get(key)
    if sql is None:
        sets = ", ".join(f"{name} = ?" for name in ("state", "updated_at", *values))
        if event_seqs:
            sets += ", last_event_seq = last_event_seq + 1"
        marks = ", ".join("?" for _ in allowed)
        fence = " AND epoch = ?" if epoch is not None else ""
        guarded = hot.row_guard("state")  # found by its key, not the state index: see there
        sql = f"UPDATE sessions SET {sets} WHERE id = ? AND {guarded} IN ({marks}){fence}"
        if returning is not None:
            sql += f" RETURNING {returning}"
        _SESSION_TRANSITION_SQL[key] = sql
    params: tuple[Any, ...] = (target.value, time.time(), *values.values(), session_id, *allowed)
    if epoch is not None:
        params = (*params, epoch)
    cursor = raw.execute(sql, params)
    if returning is None:
        returned, applied = None, cursor.rowcount == 1
    else:  # a RETURNING statement's row count is not known before its rows are read
        returned = cursor.fetchone()
        applied = returned is not None
    if not applied:
        found = raw.execute("SELECT state, epoch FROM sessions WHERE id = ?", (session_id,))
        row = found.fetchone()
        if row is None:
            raise SessionNotFound(session_id)
        state, current_epoch = row
        if epoch is not None and current_epoch != epoch:
            raise StaleEpoch(session_id, epoch)
        SESSION_MACHINE.next_state(SessionState(state), event, subject=session_id)  # raises
    return target, returned


# PostgreSQL notification channels (store/listen.py has the whole contract). Names are
# hashes (md5 hex) so that any owner or session id makes a valid identifier under 63 bytes.
UNOWNED_CHANNEL = "acpctl_unowned"  # work of a session nobody listening owns: every node
WORK_PREFIX = "acpctl_n_"  # + md5(owner id): work for the sessions that node owns
SESSION_PREFIX = "acpctl_s_"  # + md5(session id): a session's stream, for its watchers
# The advisory lock a node's listener holds (session-level, exclusive) while it is connected
# and listening on its work channel: a write sees whether the owner hears its channel.
LISTENER_LOCK_CLASS = 1633906787  # "acpc": the two-key space, apart from the migration's


def owner_key_sql(owner: str) -> str:
    """The second key of an owner's listener lock (int4 from md5), in SQL."""
    return f"('x' || substr(md5({owner}), 1, 8))::bit(32)::int"


# A group commit's notification (store/writer.py runs it once per session that the group
# appended to or finished commands of): the session's channel only. Its owner wrote it; only
# the nodes watching the session (a client following it elsewhere) listen there.
NOTIFY_SQL = (
    f"SELECT pg_notify('{SESSION_PREFIX}' || md5(v.id), v.id) FROM (SELECT CAST(? AS text) AS id) v"
)
# Work for a session (``notify_session``): its owner's channel while the owner's listener is
# connected (it holds its lock, so the shared try fails), else the unowned channel. One
# statement, as before: the owner comes from the session's row, which the writes that call
# this have already updated in this transaction (so the read adds no serializable-read
# dependency), and the listener check is a lock try, not a read of ``nodes``.
_WORK_CHANNEL = (
    "CASE WHEN s.owner IS NOT NULL AND NOT pg_try_advisory_xact_lock_shared("
    f"{LISTENER_LOCK_CLASS}, {owner_key_sql('s.owner')})"
    f" THEN '{WORK_PREFIX}' || md5(s.owner) ELSE '{UNOWNED_CHANNEL}' END"
)
_WORK_FROM = " FROM (SELECT CAST(? AS text) AS id) v LEFT JOIN sessions s ON s.id = v.id"
WORK_NOTIFY_SQL = f"SELECT pg_notify({_WORK_CHANNEL}, v.id){_WORK_FROM}"
WORK_AND_WATCHERS_NOTIFY_SQL = (
    f"SELECT pg_notify({_WORK_CHANNEL}, v.id),"
    f" pg_notify('{SESSION_PREFIX}' || md5(v.id), v.id){_WORK_FROM}"
)


def notify_session(ctx: WriteContext, session_id: str, watchers: bool = True) -> None:
    """PostgreSQL: when this transaction commits, the node that owns the session (or, with
    no owner listening, every node) hears that it has new work, a cancel or a close, and
    acts at once instead of at its next discovery; with ``watchers`` also every node that
    watches the session (its feeds read the log). PostgreSQL folds repeats within one
    transaction. SQLite: nothing (one machine: the processes poll, and this process wakes
    its own actors directly)."""
    if isinstance(ctx.raw, PgRaw):
        sql = WORK_AND_WATCHERS_NOTIFY_SQL if watchers else WORK_NOTIFY_SQL
        ctx.raw.execute(sql, (session_id,))


def insert_command(
    ctx: WriteContext,
    session_id: str,
    kind: CommandKind,
    payload: dict[str, Any],
    idempotency_key: str | None,
    max_attempts: int,
    priority: int = 0,
    seq: int | None = None,
) -> CommandRecord:
    """Insert a queued command at ``seq`` (taken from the session in this transaction by
    the caller) or, without one, at the session's next command seq."""
    raw = ctx.raw
    if seq is None:
        row = raw.execute(hot.NEXT_COMMAND_SEQ, (session_id,)).fetchone()
        if row is None:
            if not hot.session_exists(raw, session_id):
                raise SessionNotFound(session_id)
            raise SessionClosed(session_id)
        seq = int(row[0])
    now = time.time()
    payload_text, digest = canonical_payload(kind.value, payload)
    record = hot.queued_command_row(
        new_id(),
        session_id,
        seq,
        kind.value,
        payload_text,
        idempotency_key,
        digest,
        priority,
        max_attempts,
        now,
    )
    raw.execute(hot.INSERT_COMMAND, record)
    # Its owner only: a queued command is neither an event nor a finish, which is all a
    # watcher is fed (the turn's events reach them with the owner's commits).
    notify_session(ctx, session_id, watchers=False)
    return hot.command_from_tuple(record)


_TRANSITION_SQL: dict[tuple[tuple[str, ...], int], str] = {}


@functools.cache
def _command_event_guard(event: CommandEvent) -> tuple[CommandState, tuple[str, ...]]:
    """The event's target state and the states it may leave from (from the table)."""
    (target,) = COMMAND_MACHINE.targets(event)  # every command event has one target state
    return target, tuple(sorted(s.value for s in COMMAND_MACHINE.sources(event)))


def transition_command(
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
