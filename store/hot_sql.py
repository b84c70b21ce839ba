"""The hot write path in fixed SQL on the writer's driver connection.

Measured here: a SQLAlchemy Core statement built per call costs ~280 µs of CPU, a prebuilt
one ~100 µs, a fixed SQL string on the ``sqlite3`` connection ~20 µs. The writer thread is
CPU-bound long before the disk is (fsync ~0.3 ms per group), so the operations every command
goes through (enqueue, claim, finish, append events, checkpoint) use these statements, one
``UPDATE ... RETURNING`` where a read-modify-write would take three. They run inside the
group-commit transaction SQLAlchemy opened, on the same connection. Column lists are derived
from the Core tables in ``store/schema.py``, so the two cannot drift apart.
"""

from __future__ import annotations

import operator
from typing import Any

from state_machines import (
    COMMAND_MACHINE,
    SESSION_MACHINE,
    CommandEvent,
    CommandState,
    SessionEvent,
    SessionState,
)
from store.raw import RawConnection
from store.records import CommandKind, CommandRecord, EventRecord
from store.schema import bindings, commands, delivery_checkpoints, events, sessions

# State literals come from the enums and the transition table, never typed into the SQL.
_QUEUED = CommandState.QUEUED.value
_CLOSED = SessionState.CLOSED.value
(_CLAIMED,) = (s.value for s in COMMAND_MACHINE.targets(CommandEvent.CLAIM))
(_CLAIMABLE,) = (s.value for s in COMMAND_MACHINE.sources(CommandEvent.CLAIM))
# The one state a turn starts from (a claim offer's session must be in it).
(_TURN_STARTABLE,) = (s.value for s in SESSION_MACHINE.sources(SessionEvent.TURN_STARTED))

COMMAND_COLUMNS = tuple(c.name for c in commands.columns)
_CMD_COLS = ", ".join(COMMAND_COLUMNS)
_IDX = {name: i for i, name in enumerate(COMMAND_COLUMNS)}


def row_guard(column: str) -> str:
    """A guard on a column of a row the statement finds by its key (``WHERE id = ? AND
    state IN (...)``), spelled so that no index on that column can serve the lookup.

    PostgreSQL's serializable isolation records what a statement read as SIRead locks, and a
    B-tree index scan locks whole leaf pages. Given ``id = ? AND state = 'running'``, the
    planner may find the row through the index on ``state`` (``ix_commands_state``,
    ``ix_sessions_state_updated``) instead of the primary key: with statistics of a store
    that has history (many finished commands, few running) it does, measured with EXPLAIN
    and ``pg_locks``. That index's ``running`` (or ``queued``, ``idle``) range holds the
    entries of every node's sessions on one or two pages, and every other node's claim,
    finish or enqueue inserts into it: a read-write conflict between transactions on
    unrelated sessions, and with two of them a serialization failure that reruns a whole
    group commit. Through the primary key the lock is on the key's own leaf page (spread
    over the key space). ``state || ''`` is the same value, so the guard decides the same
    (``state`` is never null); it is only not indexable. SQLite looks the row up by its key
    either way."""
    return f"{column} || ''"


_STATE = row_guard("state")


def _insert(table: str, columns: tuple[str, ...]) -> str:
    marks = ", ".join("?" for _ in columns)
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"


COMMAND_BY_ID = f"SELECT {_CMD_COLS} FROM commands WHERE id = ?"
COMMAND_BY_KEY = (
    "SELECT id, request_hash FROM commands WHERE session_id = ? AND idempotency_key = ?"
)
NEXT_COMMAND_SEQ = (
    "UPDATE sessions SET last_command_seq = last_command_seq + 1 "
    f"WHERE id = ? AND state != '{_CLOSED}' RETURNING last_command_seq"
)
SESSION_STATE = "SELECT state FROM sessions WHERE id = ?"
SESSION_LAST_SEQ = "SELECT last_event_seq FROM sessions WHERE id = ?"
# What a session actor needs before claiming: its state and whether anything is queued.
SESSION_WORK = (
    "SELECT s.state, EXISTS (SELECT 1 FROM commands c WHERE c.session_id = s.id "
    f"AND c.state = '{_QUEUED}') FROM sessions s WHERE s.id = ?"
)
# Whether anything is queued, read in the transaction that records a turn's outcome: by
# the UPDATE that ends the turn, as its RETURNING expression (of the updated session row).
HAS_QUEUED_HERE = (
    f"EXISTS (SELECT 1 FROM commands c WHERE c.session_id = sessions.id AND c.state = '{_QUEUED}')"
)
# Queueing a prompt: its seq taken (as NEXT_COMMAND_SEQ) and, in the same statement, what
# decides the rest: the session's queue mode and whether a budget stopped it (no usage row
# yet: not stopped). A prompt refused after it (a budget's stop) raises, and the write's
# rollback gives the seq back.
PROMPT_SEQ_AND_TERMS = (
    "UPDATE sessions SET last_command_seq = last_command_seq + 1 "
    f"WHERE id = ? AND state != '{_CLOSED}' RETURNING last_command_seq, queue_mode, "
    "(SELECT u.stopped_by FROM session_usage u WHERE u.session_id = sessions.id)"
)
# What decides which budgets apply to a session, read at every turn's end.
SESSION_BUDGET_FACTS = "SELECT metadata, parent_id FROM sessions WHERE id = ?"
INSERT_COMMAND = _insert("commands", COMMAND_COLUMNS)
CLAIM_NEXT = (
    f"UPDATE commands SET state = '{_CLAIMED}', attempts = attempts + 1, started_at = ?, "
    "updated_at = ? WHERE id = (SELECT id FROM commands WHERE session_id = ? "
    f"AND state = '{_CLAIMABLE}' ORDER BY priority DESC, seq LIMIT 1) "
    f"RETURNING {_CMD_COLS}"
)
# A prompt claimed in the transaction that queued it (a claim offer's write), in one
# statement: claimed only if it is the head of its session's queue (in CLAIM_NEXT's order)
# and the session is idle at its live owner's epoch; otherwise no row and nothing changed.
CLAIM_SUBMITTED = (
    f"UPDATE commands SET state = '{_CLAIMED}', attempts = attempts + 1, started_at = ?, "
    f"updated_at = ? WHERE id = ? AND {_STATE} = '{_CLAIMABLE}' AND id = (SELECT c.id FROM "
    f"commands c WHERE c.session_id = ? AND c.state = '{_CLAIMABLE}' "
    "ORDER BY c.priority DESC, c.seq LIMIT 1) AND EXISTS (SELECT 1 FROM sessions s "
    f"WHERE s.id = ? AND s.epoch = ? AND {row_guard('s.state')} = '{_TURN_STARTABLE}') "
    f"RETURNING {_CMD_COLS}"
)
NEXT_EVENT_SEQ = (
    "UPDATE sessions SET last_event_seq = last_event_seq + ? WHERE id = ? "
    "RETURNING last_event_seq, state"
)
# The same for an owner's write, fenced by its epoch (no row: gone, or a stale epoch): the
# fence costs no statement of its own.
NEXT_EVENT_SEQ_FENCED = (
    "UPDATE sessions SET last_event_seq = last_event_seq + ? WHERE id = ? AND epoch = ? "
    "RETURNING last_event_seq, state"
)
_EVENT_COLS = ", ".join(c.name for c in events.columns if c.name != "id")
INSERT_EVENT = f"INSERT INTO events ({_EVENT_COLS}) VALUES (?, ?, ?, ?, ?, ?) RETURNING id"
INSERT_EVENT_NO_RETURN = f"INSERT INTO events ({_EVENT_COLS}) VALUES (?, ?, ?, ?, ?, ?)"


# The spawn (store/ops/sessions.py): a spawn key's earlier session, a new child's parent in
# one read (what the limits and the budget check need), and the three inserts.
SESSION_BY_SPAWN_KEY = "SELECT id, request_hash FROM sessions WHERE spawn_key = ?"
PARENT_OF_CHILD = (
    "SELECT p.state, p.depth, p.placement, (SELECT count(*) FROM sessions c "
    f"WHERE c.parent_id = p.id AND c.state != '{_CLOSED}'), "
    "(SELECT u.stopped_by FROM session_usage u WHERE u.session_id = p.id) "
    "FROM sessions p WHERE p.id = ?"
)
SESSION_COLUMNS = tuple(c.name for c in sessions.columns)
BINDING_COLUMNS = tuple(c.name for c in bindings.columns)
CHECKPOINT_COLUMNS = tuple(c.name for c in delivery_checkpoints.columns)


INSERT_SESSION = _insert("sessions", SESSION_COLUMNS)
INSERT_BINDING = _insert("bindings", BINDING_COLUMNS)
INSERT_CHECKPOINT = _insert("delivery_checkpoints", CHECKPOINT_COLUMNS)


def transition_sql(values: tuple[str, ...], allowed: int) -> str:
    """``UPDATE commands SET state=?, updated_at=?, <values> WHERE id=? AND state IN (...)``,
    the guard found through the primary key (``row_guard``)."""
    sets = ", ".join(f"{name} = ?" for name in ("state", "updated_at", *values))
    marks = ", ".join("?" for _ in range(allowed))
    return (
        f"UPDATE commands SET {sets} WHERE id = ? AND {_STATE} IN ({marks}) RETURNING {_CMD_COLS}"
    )


_I_ID, _I_SESSION, _I_SEQ, _I_KIND, _I_PAYLOAD, _I_KEY = (
    _IDX[n] for n in ("id", "session_id", "seq", "kind", "payload", "idempotency_key")
)
_I_STATE, _I_ATTEMPTS, _I_MAX, _I_RESULT, _I_ERROR = (
    _IDX[n] for n in ("state", "attempts", "max_attempts", "result", "error")
)
_I_CREATED, _I_STARTED, _I_FINISHED = (_IDX[n] for n in ("created_at", "started_at", "finished_at"))


_COMMAND_ROW = operator.itemgetter(*COMMAND_COLUMNS)
_new_object = object.__new__
# Enum members by value: a dict lookup instead of an ``Enum(value)`` call (three per write).
_KINDS: dict[str, CommandKind] = {k.value: k for k in CommandKind}
_STATES: dict[str, CommandState] = {s.value: s for s in CommandState}


def queued_command_row(
    command_id: str,
    session_id: str,
    seq: int,
    kind: str,
    payload: str,
    idempotency_key: str | None,
    request_hash: str,
    priority: int,
    max_attempts: int,
    at: float,
) -> tuple[Any, ...]:
    """A new ``queued`` command's row as a tuple in ``COMMAND_COLUMNS`` order."""
    values = {
        "id": command_id,
        "session_id": session_id,
        "seq": seq,
        "kind": kind,
        "payload": payload,
        "idempotency_key": idempotency_key,
        "request_hash": request_hash,
        "state": CommandState.QUEUED.value,
        "priority": priority,
        "attempts": 0,
        "max_attempts": max_attempts,
        "result": None,
        "error": None,
        "created_at": at,
        "started_at": None,
        "finished_at": None,
        "updated_at": at,
    }
    row: tuple[Any, ...] = _COMMAND_ROW(values)
    return row


def command_from_tuple(row: tuple[Any, ...]) -> CommandRecord:
    # Every write of a command builds one of these on the writer thread. A frozen
    # dataclass's ``__init__`` sets each of its 14 fields through ``object.__setattr__``
    # (this function took 6.1 µs with it, 1.3 µs now); filling the instance's dictionary
    # makes the same record (same fields, equality, hash, repr, and no assignment).
    record: CommandRecord = _new_object(CommandRecord)
    record.__dict__.update(
        id=row[_I_ID],
        session_id=row[_I_SESSION],
        seq=row[_I_SEQ],
        kind=_KINDS[row[_I_KIND]],
        payload_json=row[_I_PAYLOAD],
        idempotency_key=row[_I_KEY],
        state=_STATES[row[_I_STATE]],
        attempts=row[_I_ATTEMPTS],
        max_attempts=row[_I_MAX],
        result_json=row[_I_RESULT],
        error=row[_I_ERROR],
        created_ts=row[_I_CREATED],
        started_ts=row[_I_STARTED],
        finished_ts=row[_I_FINISHED],
    )
    return record


def session_exists(raw: RawConnection, session_id: str) -> bool:
    return raw.execute(SESSION_STATE, (session_id,)).fetchone() is not None


def fetch_command(raw: RawConnection, command_id: str) -> tuple[Any, ...] | None:
    row: tuple[Any, ...] | None = raw.execute(COMMAND_BY_ID, (command_id,)).fetchone()
    return row


def event_record(
    event_id: int,
    session_id: str,
    seq: int,
    command_id: str | None,
    kind: str,
    raw: str,
    created_at: float,
) -> EventRecord:
    return EventRecord(event_id, session_id, seq, command_id, kind, raw, created_at)


# A turn's usage added to the session's row (``store/ops/budgets.py``; once per turn end).
# ``ON CONFLICT ... DO UPDATE`` is spelled the same on SQLite and PostgreSQL; only the
# scalar "larger of two" differs (``max`` / ``greatest``), hence two texts.
_USAGE_UPSERT = (
    "INSERT INTO session_usage (session_id, input_tokens, output_tokens, total_tokens, "
    "cost_usd, priced_usd, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (session_id) DO UPDATE SET "
    "input_tokens = session_usage.input_tokens + excluded.input_tokens, "
    "output_tokens = session_usage.output_tokens + excluded.output_tokens, "
    "total_tokens = session_usage.total_tokens + excluded.total_tokens, "
    "priced_usd = session_usage.priced_usd + excluded.priced_usd, "
    "updated_at = excluded.updated_at"
)
USAGE_ADD = _USAGE_UPSERT
USAGE_ADD_COST = {
    "sqlite": _USAGE_UPSERT + ", cost_usd = max(excluded.cost_usd, session_usage.cost_usd)",
    "postgresql": _USAGE_UPSERT
    + ", cost_usd = greatest(excluded.cost_usd, session_usage.cost_usd)",
}
