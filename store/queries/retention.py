"""Reads of retention (``acpctl gc``): which session trees may go, which are kept and why,
and what an archive of a tree holds.

A tree is judged as a whole, from its root: it may be deleted only when every session in
it is in one of the chosen states, was last updated before the cutoff, is not owned by a
live process, has no queued or running command, and (unless forced) has delivered its
whole log to every sink. The same judgement runs on a reader for the plan and again inside
the write transaction that claims the tree (store/ops/retention.py), so nothing that
changed in between is deleted.

A claimed tree carries a mark in every session's ``metadata`` (``retentionClaim``): a gc killed
half-way leaves it marked, and the next gc finds it by the mark (not by age or state) and
finishes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, func, select

from state_machines import CommandState, SessionState
from store.dialect_sql import json_text
from store.queries.nodes import Liveness
from store.records import SinkKind
from store.schema import bindings, commands, delivery_checkpoints, events, sessions

# The key of the mark a claimed tree's sessions carry in their metadata. Metadata also holds
# what callers passed at spawn: a mark is only taken for one with the shape a claim writes
# (``TreeSession.mark``), so a caller's own key of that name is never mistaken for a claim.
MARK_KEY = "retentionClaim"
# States a session is never deleted in, whatever was asked: it is being made or in a turn.
NEVER_DELETED = frozenset(
    {SessionState.CREATING.value, SessionState.RUNNING.value, SessionState.CANCELLING.value}
)
# IN lists are cut to this many ids (well under any backend's parameter limit).
_CHUNK = 500


class Kept:
    """Why a tree is kept (``TreeVerdict.kept``)."""

    BUSY = "busy"  # a session is being created or in a turn
    STATE = "state"  # a session is in a state not chosen
    RECENT = "recent"  # a session was updated after the cutoff
    OWNED = "owned"  # a session is owned by a live process
    QUEUED = "queued"  # a session has queued or running commands
    UNDELIVERED = "undelivered"  # a sink has not received the whole log (--force deletes)
    CLAIMED = "claimed"  # another live gc is deleting it
    CHANGED = "changed"  # it changed between the plan (or archive) and the claim
    IMPORTED = "imported"  # an imported transcript (--include-imported deletes)


@dataclass(frozen=True)
class RetentionRule:
    """What may go: sessions in ``states`` last updated before ``cutoff`` (unix seconds);
    ``force`` also deletes trees whose output a sink has not received."""

    states: frozenset[str]
    cutoff: float
    force: bool = False
    # Imported transcripts are kept unless asked: someone brought them in to keep them, and
    # their age counts from the import, not from the conversation.
    include_imported: bool = False


@dataclass(frozen=True)
class TreeSession:
    """One session of a tree, as retention sees it."""

    id: str
    parent_id: str | None
    state: str
    owner: str | None
    updated_at: float
    last_event_seq: int
    last_command_seq: int
    metadata_text: str

    @property
    def mark(self) -> dict[str, Any] | None:
        """The retention mark (the tree is claimed, maybe partly deleted), or None."""
        value = json.loads(self.metadata_text).get(MARK_KEY)
        if (
            isinstance(value, dict)
            and isinstance(value.get("by"), str)
            and isinstance(value.get("since"), int | float)
        ):
            return value
        return None

    @property
    def counters(self) -> tuple[int, int]:
        """What says whether the session changed: its last event and command seqs."""
        return self.last_event_seq, self.last_command_seq


@dataclass(frozen=True)
class Undelivered:
    """A binding whose checkpoint trails its session's log."""

    binding_id: str
    session_id: str
    sink_kind: str
    target: str
    delivered_seq: int
    last_seq: int

    def describe(self) -> str:
        return (
            f"{self.sink_kind} sink {self.target} of session {self.session_id} has "
            f"{self.delivered_seq} of {self.last_seq} events"
        )


@dataclass(frozen=True)
class TreeVerdict:
    """A tree (parents before children) and whether it may go: ``kept`` is None when it
    may, else a ``Kept`` reason with ``detail`` for people. ``resumed``: a gc claimed it
    before and did not finish."""

    root: str
    sessions: tuple[TreeSession, ...]
    kept: str | None = None
    detail: str = ""
    undelivered: tuple[Undelivered, ...] = field(default_factory=tuple)
    resumed: bool = False

    @property
    def events(self) -> int:
        """Events in the tree as its counters say (exact unless a gc deleted some)."""
        return sum(s.last_event_seq for s in self.sessions)

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.sessions]

    def keep(
        self, reason: str, detail: str, undelivered: Sequence[Undelivered] = ()
    ) -> TreeVerdict:
        return TreeVerdict(self.root, self.sessions, reason, detail, tuple(undelivered))


_TREE_COLUMNS = (
    sessions.c.id,
    sessions.c.parent_id,
    sessions.c.state,
    sessions.c.owner,
    sessions.c.updated_at,
    sessions.c.last_event_seq,
    sessions.c.last_command_seq,
    sessions.c.metadata,
)


def _chunks(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


def _tree_session(row: Any) -> TreeSession:
    return TreeSession(
        row.id,
        row.parent_id,
        row.state,
        row.owner,
        float(row.updated_at),
        int(row.last_event_seq),
        int(row.last_command_seq),
        row.metadata,
    )


def candidate_roots(conn: Connection, rule: RetentionRule) -> list[str]:
    """Roots (no parent) in a chosen state, last updated before the cutoff, oldest first.
    Their trees still have to be judged as a whole (``judge_tree``)."""
    query = (
        select(sessions.c.id)
        .where(
            sessions.c.parent_id.is_(None),
            sessions.c.state.in_(sorted(rule.states)),
            sessions.c.updated_at < rule.cutoff,
        )
        .order_by(sessions.c.updated_at, sessions.c.id)
    )
    return list(conn.execute(query).scalars())


def marked_roots(conn: Connection) -> list[str]:
    """Roots of trees a gc claimed and did not finish (their rows go last, so the root of a
    half-deleted tree is always still there)."""
    query = (
        select(sessions.c.id)
        .where(
            sessions.c.parent_id.is_(None),
            sessions.c.state == SessionState.CLOSED.value,
            json_text(conn, sessions.c.metadata, MARK_KEY).is_not(None),
        )
        .order_by(sessions.c.updated_at, sessions.c.id)
    )
    return list(conn.execute(query).scalars())


def tree_sessions(conn: Connection, root_id: str) -> list[TreeSession]:
    """The root and every session below it, parents before children (empty: no root)."""
    row = conn.execute(select(*_TREE_COLUMNS).where(sessions.c.id == root_id)).first()
    if row is None:
        return []
    found = [_tree_session(row)]
    frontier = [root_id]
    while frontier:
        level: list[TreeSession] = []
        for chunk in _chunks(frontier):
            rows = conn.execute(
                select(*_TREE_COLUMNS)
                .where(sessions.c.parent_id.in_(chunk))
                .order_by(sessions.c.created_at, sessions.c.id)
            )
            level.extend(_tree_session(r) for r in rows)
        found.extend(level)
        frontier = [s.id for s in level]
    return found


def with_open_commands(conn: Connection, ids: Sequence[str]) -> set[str]:
    """Which of the sessions have a queued or running command (work about to run)."""
    open_states = [CommandState.QUEUED.value, CommandState.RUNNING.value]
    found: set[str] = set()
    for chunk in _chunks(ids):
        query = (
            select(commands.c.session_id)
            .where(commands.c.session_id.in_(chunk), commands.c.state.in_(open_states))
            .distinct()
        )
        found.update(conn.execute(query).scalars())
    return found


def undelivered_of(conn: Connection, ids: Sequence[str]) -> list[Undelivered]:
    """Bindings of the sessions, active or not, whose checkpoint trails the session's log.
    A ``parent`` binding announces into the session's parent, which is in the same tree and
    goes with it: it is not a reason to keep the tree."""
    delivered = func.coalesce(delivery_checkpoints.c.last_event_seq, 0)
    found: list[Undelivered] = []
    for chunk in _chunks(ids):
        query = (
            select(
                bindings.c.id,
                bindings.c.session_id,
                bindings.c.sink_kind,
                bindings.c.target,
                delivered.label("delivered"),
                sessions.c.last_event_seq,
            )
            .join(sessions, sessions.c.id == bindings.c.session_id)
            .join(
                delivery_checkpoints,
                delivery_checkpoints.c.binding_id == bindings.c.id,
                isouter=True,
            )
            .where(
                bindings.c.session_id.in_(chunk),
                bindings.c.sink_kind != SinkKind.PARENT.value,
                delivered < sessions.c.last_event_seq,
            )
            .order_by(bindings.c.session_id, bindings.c.bound_at)
        )
        found.extend(
            Undelivered(r.id, r.session_id, r.sink_kind, r.target, int(r.delivered), int(r[5]))
            for r in conn.execute(query)
        )
    return found


def _metadata(session: TreeSession) -> dict[str, Any]:
    try:
        value = json.loads(session.metadata_text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def judge_tree(conn: Connection, root_id: str, rule: RetentionRule, me: str) -> TreeVerdict | None:
    """Whether the tree under ``root_id`` may go now (None: the root is gone). ``me`` is
    this process's owner id: a tree this process claimed earlier is resumed, one a live
    other process claimed is left to it."""
    tree = tree_sessions(conn, root_id)
    if not tree or tree[0].parent_id is not None:
        return None
    verdict = TreeVerdict(root_id, tuple(tree))
    liveness = Liveness(conn)
    mark = tree[0].mark
    if mark is not None:
        claimant = mark.get("by")
        if claimant != me and liveness.alive(claimant):
            return verdict.keep(Kept.CLAIMED, f"being deleted by process {claimant}")
        return TreeVerdict(root_id, tuple(tree), resumed=True)
    if not rule.include_imported and "imported" in _metadata(tree[0]):
        return verdict.keep(Kept.IMPORTED, f"session {root_id} is an imported transcript")
    for s in tree:
        if s.state in NEVER_DELETED:
            return verdict.keep(Kept.BUSY, f"session {s.id} is {s.state}")
        if s.state not in rule.states:
            return verdict.keep(Kept.STATE, f"session {s.id} is {s.state}")
        if s.updated_at >= rule.cutoff:
            return verdict.keep(Kept.RECENT, f"session {s.id} was updated after the cutoff")
        if liveness.alive(s.owner):
            return verdict.keep(Kept.OWNED, f"session {s.id} is owned by live process {s.owner}")
    busy = with_open_commands(conn, verdict.ids)
    if busy:
        return verdict.keep(Kept.QUEUED, f"session {min(busy)} has queued or running commands")
    behind = undelivered_of(conn, verdict.ids)
    if behind and not rule.force:
        detail = "; ".join(u.describe() for u in behind)
        return verdict.keep(Kept.UNDELIVERED, detail, behind)
    return TreeVerdict(root_id, tuple(tree), undelivered=tuple(behind))


def archive_events(
    conn: Connection, session_id: str, after_seq: int, upto_seq: int, limit: int
) -> list[tuple[int, int, str | None, str, str, float]]:
    """A page of the session's raw event log for an archive: ``(id, seq, command_id, kind,
    payload text, created_at)`` as stored, ``after_seq < seq <= upto_seq``, in seq order."""
    query = (
        select(
            events.c.id,
            events.c.seq,
            events.c.command_id,
            events.c.kind,
            events.c.payload,
            events.c.created_at,
        )
        .where(
            events.c.session_id == session_id,
            events.c.seq > after_seq,
            events.c.seq <= upto_seq,
        )
        .order_by(events.c.seq)
        .limit(limit)
    )
    return [
        (int(r[0]), int(r[1]), r[2], str(r[3]), str(r[4]), float(r[5])) for r in conn.execute(query)
    ]


def archive_commands(conn: Connection, session_id: str) -> list[dict[str, Any]]:
    """The session's commands for an archive: every column as stored, in seq order."""
    query = select(commands).where(commands.c.session_id == session_id).order_by(commands.c.seq)
    return [dict(r._mapping) for r in conn.execute(query)]


def archive_session_row(conn: Connection, session_id: str) -> dict[str, Any] | None:
    """The session's row for an archive's manifest: every column as stored."""
    row = conn.execute(select(sessions).where(sessions.c.id == session_id)).first()
    return None if row is None else dict(row._mapping)
