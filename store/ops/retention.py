"""Retention's writes (``acpctl gc``): claim a tree, then delete it a little at a time.

Each function runs inside one transaction of the group-commit writer, and the callers keep
those transactions short (``delete_some`` stops at a row budget and a deadline), so the
write lock is never held long and live turns go on between them.

Why the order is crash-safe:

1. ``claim_tree`` judges the tree again under the write lock, then moves every session of
   it to ``closed`` (an ``idle`` or ``error`` one would otherwise be resumable: a prompt
   would restart it on a log with holes) and marks each with ``metadata.retentionClaim``
   (who claimed it, when, its archive). All of the tree or nothing.
2. ``delete_some`` deletes, per session and children before parents: the events (by
   ``(session_id, seq)`` ranges from the lowest seq left: the ``uq_events_session_seq``
   index), then search documents, permission requests, usage, delivery checkpoints,
   bindings, commands, and the session's row last. A parent's row cannot go before its
   children's (the foreign key), so the marked root is the last row of the tree to go.

A crash anywhere leaves either an unclaimed tree (nothing deleted) or a marked root, which
the next gc finds (``queries.retention.marked_roots``) and finishes without archiving it
again (its events are partly gone; the archive it recorded was verified before step 2).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from state_machines import SessionState
from store.faults import fault_point
from store.queries.retention import MARK_KEY, Kept, RetentionRule, TreeVerdict, judge_tree
from store.raw import RawConnection
from store.writer import WriteContext

_CLOSE_MARKED = (
    "UPDATE sessions SET state = ?, closed_at = COALESCE(closed_at, ?), metadata = ? "
    "WHERE id = ? AND state = ?"
)
_TAKE_OVER = "UPDATE sessions SET metadata = ? WHERE id = ? AND metadata = ?"

_LOWEST_EVENT = "SELECT min(seq) FROM events WHERE session_id = ?"
_DELETE_EVENTS = "DELETE FROM events WHERE session_id = ? AND seq < ?"


def _batched(table: str, key: str) -> str:
    return (
        f"DELETE FROM {table} WHERE {key} IN "
        f"(SELECT {key} FROM {table} WHERE session_id = ? LIMIT ?)"
    )


# What else a session owns, in the order it is deleted after its events: each statement
# deletes at most LIMIT rows, so a session with many of them spreads over transactions.
# search_docs: on SQLite its FTS5 index follows by trigger (store/search_ddl.py).
_REST = (
    _batched("search_docs", "id"),
    _batched("permission_requests", "id"),
    _batched("session_usage", "session_id"),
    "DELETE FROM delivery_checkpoints WHERE binding_id IN (SELECT c.binding_id FROM "
    "delivery_checkpoints c JOIN bindings b ON b.id = c.binding_id WHERE b.session_id = ? "
    "LIMIT ?)",
    _batched("bindings", "id"),
    _batched("commands", "id"),
)
_DELETE_SESSION = "DELETE FROM sessions WHERE id = ?"


def claim_tree(
    ctx: WriteContext,
    root_id: str,
    rule: RetentionRule,
    me: str,
    expected: Mapping[str, tuple[int, int]] | None = None,
    archive: dict[str, Any] | None = None,
) -> TreeVerdict | None:
    """Judge the tree again and, if it may go, claim it for ``me`` (see the module
    docstring); returns the verdict (``kept`` set: nothing was written; None: the root is
    gone). ``expected``: each session's ``(last_event_seq, last_command_seq)`` when its
    archive was read; a tree that moved on since is kept (``Kept.CHANGED``). ``archive``
    (its path and digest) is recorded in the mark. A tree claimed before by a process
    that is gone is taken over, unchanged."""
    verdict = judge_tree(ctx.conn, root_id, rule, me)
    if verdict is None or verdict.kept is not None:
        return verdict
    if verdict.resumed:
        _take_over(ctx.raw, verdict, me)
        return verdict
    if expected is not None and {s.id: s.counters for s in verdict.sessions} != dict(expected):
        return verdict.keep(Kept.CHANGED, "the tree changed while it was being archived")
    now = time.time()
    closed = SessionState.CLOSED.value
    for s in verdict.sessions:
        metadata = json.loads(s.metadata_text)
        metadata[MARK_KEY] = {
            "by": me,
            "since": now,
            "state": s.state,  # before the claim closed it
            "archive": archive,
            "forced": bool(verdict.undelivered),
        }
        params = (closed, now, _compact(metadata), s.id, s.state)
        if ctx.raw.execute(_CLOSE_MARKED, params).rowcount != 1:
            # Cannot happen under the write lock; if it did, the write's rollback undoes
            # the marks already made, and the tree stays as it was.
            raise RuntimeError(f"session {s.id} changed while its tree was being claimed")
    return verdict


def _take_over(raw: RawConnection, verdict: TreeVerdict, me: str) -> None:
    """A tree claimed by a process that died (or by this one, earlier) is ours now: the
    root's mark names us, compared and set, so two gcs never both take it over."""
    root = verdict.sessions[0]
    metadata = json.loads(root.metadata_text)
    if metadata[MARK_KEY].get("by") == me:
        return
    metadata[MARK_KEY]["by"] = me
    if raw.execute(_TAKE_OVER, (_compact(metadata), root.id, root.metadata_text)).rowcount != 1:
        raise RuntimeError(f"the claim of tree {root.id} changed while it was taken over")


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Deleted:
    """What one ``delete_some`` transaction deleted: rows in all, events among them, and
    how many of the sessions it was given are now gone entirely (a prefix of them)."""

    rows: int
    events: int
    sessions_done: int


def delete_some(
    ctx: WriteContext, session_ids: Sequence[str], max_rows: int, deadline: float
) -> Deleted:
    """Delete up to about ``max_rows`` rows of the given claimed sessions, in order (pass
    children before parents), stopping early once ``time.perf_counter()`` passes
    ``deadline``: see the module docstring for what goes in which order. Nothing here keeps
    state between transactions: where to go on is read back (the lowest seq left, the rows
    left), so a crash between two calls loses nothing and repeats nothing."""
    raw = ctx.raw
    rows = events = done = 0
    for session_id in session_ids:
        if rows >= max_rows or time.perf_counter() > deadline:
            break
        gone, deleted = _delete_events(raw, session_id, max_rows - rows, deadline)
        rows += deleted
        events += deleted
        fault_point("retention.in_transaction")
        if not gone:
            break
        for statement in _REST:
            left = max_rows - rows
            if left <= 0 or time.perf_counter() > deadline:
                return Deleted(rows, events, done)
            deleted = raw.execute(statement, (session_id, left)).rowcount
            rows += deleted
            if deleted >= left:  # maybe more of this kind: the next transaction goes on
                return Deleted(rows, events, done)
        rows += raw.execute(_DELETE_SESSION, (session_id,)).rowcount
        done += 1
    return Deleted(rows, events, done)


def _delete_events(
    raw: RawConnection, session_id: str, budget: int, deadline: float
) -> tuple[bool, int]:
    """Delete the session's events from its lowest seq up, at most ``budget`` of them, by
    seq range (seqs have no gaps, so a range of n seqs holds at most n events). Returns
    (none left, how many deleted)."""
    deleted = 0
    while deleted < budget:
        (lowest,) = raw.execute(_LOWEST_EVENT, (session_id,)).fetchone()
        if lowest is None:
            return True, deleted
        if time.perf_counter() > deadline:
            break
        deleted += raw.execute(
            _DELETE_EVENTS, (session_id, int(lowest) + budget - deleted)
        ).rowcount
    return False, deleted


def incremental_vacuum(ctx: WriteContext, max_pages: int, deadline: float) -> tuple[int, int]:
    """SQLite, a store whose ``auto_vacuum`` is ``INCREMENTAL``: give up to ``max_pages``
    free pages back to the file system, stopping early past ``deadline``
    (``time.perf_counter()``); the file shrinks when the WAL is next checkpointed. Returns
    (pages given back, free pages left)."""
    raw = ctx.raw
    (free,) = raw.execute("PRAGMA freelist_count").fetchone()
    for _ in range(min(int(free), max_pages)):
        if time.perf_counter() > deadline:
            break
        # One page per statement: the pragma frees a page at each step, and Python's
        # sqlite3 steps a statement without result columns only once. (``executescript``
        # would step it through, but commits the writer's transaction first.)
        raw.execute("PRAGMA incremental_vacuum(1)").fetchall()
    (left,) = raw.execute("PRAGMA freelist_count").fetchone()
    return int(free) - int(left), int(left)
