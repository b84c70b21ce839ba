"""Session trees for the retention tests, made through the store's own operations: a
session in any state, with events, a sink, children; and what a store holds afterwards."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from state_machines import SessionEvent
from state_machines.event_kinds import EventKind
from store import BindingSpec, NewEvent, SinkKind, Store, ops
from store.writer import WriteContext
from tests.conftest import AGENT
from tests.support.direct_sql import execute, query

# Every table a session's rows live in, and the column naming the session.
SESSION_TABLES = (
    ("events", "session_id"),
    ("commands", "session_id"),
    ("bindings", "session_id"),
    ("session_usage", "session_id"),
    ("permission_requests", "session_id"),
    ("search_docs", "session_id"),
)


def make_session(
    store: Store,
    state: str,
    parent: str | None = None,
    events: int = 0,
    sink: Path | None = None,
    delivered: bool = True,
    prompt: bool = False,
    payload_bytes: int = 0,
) -> str:
    """A session in ``state`` (creating, idle, running, error, closed) with ``events``
    updates logged; with ``sink`` a JSONL binding, its checkpoint at the end of the log
    (``delivered``) or at 0; with ``prompt`` a queued command."""
    binding = None if sink is None else BindingSpec(SinkKind.JSONL, str(sink))
    first = [{"type": "text", "text": "hello"}] if prompt else None
    spawned = store.spawn(AGENT, "/tmp", binding, first, None, parent_id=parent)
    sid = spawned.session.id
    filler = "x" * payload_bytes
    for start in range(0, events, 5000):
        batch = [
            NewEvent(EventKind.SESSION_UPDATE, {"n": i, "pad": filler})
            for i in range(start, min(events, start + 5000))
        ]
        store.append_events(sid, None, batch)
    steps = {
        "creating": [],
        "idle": [SessionEvent.CREATED],
        "running": [SessionEvent.CREATED, SessionEvent.TURN_STARTED],
        "error": [SessionEvent.START_FAILED],
        "closed": [],
    }[state]
    for event in steps:
        store.write(partial(_transition, session_id=sid, event=event))
    if state == "closed":
        store.close_session(sid)
    if spawned.binding is not None and delivered:
        last = store.get_session(sid).last_event_seq
        store.advance_checkpoint(spawned.binding.id, last)
    return sid


def _transition(ctx: WriteContext, session_id: str, event: SessionEvent) -> None:
    ops.transition_session(ctx.conn, session_id, event)


def backdate(db: str, ids: Sequence[str], seconds: float) -> None:
    """Make the sessions look last updated ``seconds`` earlier than now."""
    for sid in ids:
        execute(db, "UPDATE sessions SET updated_at = updated_at - ? WHERE id = ?", (seconds, sid))


def remaining(db: str, ids: Sequence[str]) -> dict[str, int]:
    """Rows left of these sessions, per table (``sessions`` included)."""
    if not ids:
        return {}
    marks = ", ".join("?" for _ in ids)
    counts = {"sessions": query(db, f"SELECT count(*) FROM sessions WHERE id IN ({marks})", ids)}
    for table, column in SESSION_TABLES:
        counts[table] = query(db, f"SELECT count(*) FROM {table} WHERE {column} IN ({marks})", ids)
    counts["delivery_checkpoints"] = query(
        db,
        "SELECT count(*) FROM delivery_checkpoints c JOIN bindings b ON b.id = c.binding_id "
        f"WHERE b.session_id IN ({marks})",
        ids,
    )
    return {table: int(rows[0][0]) for table, rows in counts.items()}


def all_gone(db: str, ids: Sequence[str]) -> bool:
    return all(n == 0 for n in remaining(db, ids).values())


def consistent(db: str) -> list[str]:
    """What breaks the store's invariants after a gc (an empty list: nothing): rows of
    sessions that are gone, gaps at the bottom of a surviving session's log, a marked
    tree without its root."""
    problems = []
    for table, column in SESSION_TABLES:
        orphans = query(
            db,
            f"SELECT count(*) FROM {table} t WHERE NOT EXISTS "
            f"(SELECT 1 FROM sessions s WHERE s.id = t.{column})",
        )[0][0]
        if orphans:
            problems.append(f"{orphans} {table} rows of sessions that are gone")
    children = query(
        db,
        "SELECT count(*) FROM sessions c WHERE c.parent_id IS NOT NULL AND NOT EXISTS "
        "(SELECT 1 FROM sessions p WHERE p.id = c.parent_id)",
    )[0][0]
    if children:
        problems.append(f"{children} sessions whose parent is gone")
    # A session not claimed by a gc has its whole log: seqs 1..last_event_seq.
    for sid, last, metadata in query(db, "SELECT id, last_event_seq, metadata FROM sessions"):
        if '"retentionClaim"' in metadata:
            continue
        (count,) = query(db, "SELECT count(*) FROM events WHERE session_id = ?", (sid,))[0]
        if count != last:
            problems.append(f"session {sid} has {count} of its {last} events")
    return problems


def acpctl(
    db: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``acpctl --db DB ARGS`` in a child process (a real process to kill, or to check the
    exit code and output as a user sees them)."""
    return subprocess.run(
        [sys.executable, "-m", "control_plane.cli", "--db", db, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
