"""``Store``: the durable state of a control plane, in one SQLite file (the embedded
default) or one PostgreSQL database (shared by several control-plane nodes).

Writes go through the group-commit writer (one thread, one connection); reads use a pool of
reader connections from any thread. Every public write method blocks until the transaction
holding it has committed (with ``synchronous=FULL``: until it is on disk).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine

from state_machines import SessionNotFound, SessionState, StoreError
from state_machines.errors import CommandNotFound
from store import hot_sql as hot
from store import ops, queries
from store.commit_feed import CommitFeed
from store.driver_errors import as_damaged, is_damage
from store.feed import CommittedEvent
from store.location import Backend, StoreLocation, locate
from store.opening import StoreOptions, open_engines
from store.ownership import this_owner
from store.placement import Placement
from store.queries import search as search_queries
from store.queries.search import SearchFilters, SearchHit
from store.raw import RawConnection, raw_of
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
from store.retry import retry_on_lock
from store.search_query import SearchQuery
from store.sqlite_watch import OtherWriters, poll_interval
from store.usage import SessionUsage
from store.watch import StoreWatch
from store.writer import GroupCommitWriter, WriteContext

T = TypeVar("T")


class Store:
    """See the module docstring. Use ``Store.open(path or URL)``; close with ``close()`` or
    ``with``."""

    def __init__(
        self,
        location: StoreLocation,
        options: StoreOptions,
        write_engine: Engine,
        read_engine: Engine,
    ):
        self.location = location
        # What every message names: the file, or the URL with its password masked.
        self.path = location.display
        self.options = options
        self._write_engine = write_engine
        self._read_engine = read_engine
        self._commits = CommitFeed()  # every commit, published once (store/commit_feed.py)
        self.watch = StoreWatch(self._commits, self._watch_position)  # store/watch.py
        # What a session watcher that fell behind, or saw another writer's commit, reads.
        self._commits.sessions.read_after = self._events_after
        self._commits.sessions.read_finished = self._finished_since
        # Minted when the store was created; event ids are unique within it (see 0007).
        self.identity = ""
        if location.backend is Backend.POSTGRESQL:
            from store.ops._shared import NOTIFY_SQL
            from store.pg_engine import WRITE_BEGIN

            begin_sql, watch_file, notify_sql = WRITE_BEGIN, False, NOTIFY_SQL
        else:
            begin_sql, watch_file, notify_sql = "BEGIN IMMEDIATE", True, None
        # SQLite: other processes' commits to a watched session (PostgreSQL: store/listen.py).
        self.other_writers: OtherWriters | None = None
        if location.backend is Backend.SQLITE and (interval_s := poll_interval()) > 0:
            self.other_writers = OtherWriters(location.target, self._commits.sessions, interval_s)
        self._writer = GroupCommitWriter(
            write_engine,
            self.path,
            options.lock_timeout_s,
            on_commit=self._commits.publish,
            begin_sql=begin_sql,
            watch_file=watch_file,
            notify_sql=notify_sql,
        )

    @property
    def backend(self) -> Backend:
        return self.location.backend

    @classmethod
    def open(cls, path: str | os.PathLike[str], options: StoreOptions | None = None) -> Store:
        """Open (creating and migrating as needed) the store at a SQLite file path or a
        ``postgresql://`` URL (store/opening.py)."""
        options = options or StoreOptions()
        location = locate(path)  # UnsupportedLocation (a StoreError) for other schemes
        write_engine, read_engine = open_engines(location, options)
        store = cls(location, options, write_engine, read_engine)
        store.identity = store.read(queries.store_identity)
        return store

    @property
    def own_backend_pid(self) -> int | None:
        """PostgreSQL: the server process this store's writer commits on (None on SQLite,
        or before the first commit). What it sends with ``pg_notify`` comes back to this
        node's LISTEN too, which skips it: its own watchers and actors heard it already."""
        return self._writer.backend_pid

    def close(self) -> None:
        if self.other_writers is not None:
            self.other_writers.close()
        self._writer.close()
        self._write_engine.dispose()
        self._read_engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------------------

    def write(self, fn: Callable[[WriteContext], T], timeout: float | None = None) -> T:
        """Run ``fn`` inside a write transaction (alone, or grouped with concurrent writes).
        Several operations called from one ``fn`` commit atomically."""
        return self._writer.call(fn, timeout)

    def submit(self, fn: Callable[[WriteContext], T]) -> Future[T]:
        """Like ``write`` without blocking: the future resolves after the commit. Writes
        submitted from one thread commit in submission order."""
        return self._writer.submit(fn)

    def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` on a reader connection inside one snapshot transaction."""

        def attempt() -> T:
            with self._read_engine.connect() as conn, conn.begin():
                return fn(conn)

        return self._reading(attempt)

    def read_raw(self, fn: Callable[[RawConnection], T]) -> T:
        """Run ``fn`` on a pooled reader's driver connection, outside any transaction: for
        the hot paths' single fixed-SQL statements (each one reads one committed snapshot),
        at a fraction of a Core query's cost."""

        def attempt() -> T:
            fairy = self._read_engine.raw_connection()
            try:
                return fn(raw_of(fairy.driver_connection))
            finally:
                fairy.close()

        return self._reading(attempt)

    def _reading(self, attempt: Callable[[], T]) -> T:
        try:
            return retry_on_lock(attempt, self.options.lock_timeout_s, self.path)
        except Exception as exc:
            if not is_damage(exc):
                raise
            damaged = as_damaged(exc, self.path)
            self._writer.refuse_for_good(damaged)  # a write would land on top of the damage
            raise damaged from exc

    def session_work(self, session_id: str) -> tuple[SessionState, bool]:
        """The session's state and whether it has a queued command (``SessionNotFound``)."""
        row = self.read_raw(lambda raw: raw.execute(hot.SESSION_WORK, (session_id,)).fetchone())
        if row is None:
            raise SessionNotFound(session_id)
        return SessionState(row[0]), bool(row[1])

    def _watch_position(self, session_id: str) -> int | None:
        """Where a new session watch starts: the session's last seq (other nodes' or
        processes' commits arrive later as a gap the watch fills from the log); None on
        SQLite with no poller of other processes (this process's writer publishes all)."""
        if self.backend is not Backend.POSTGRESQL and self.other_writers is None:
            return None
        row = self.read_raw(lambda raw: raw.execute(hot.SESSION_LAST_SEQ, (session_id,)).fetchone())
        return None if row is None else int(row[0])

    def catch_up(self, session_id: str) -> None:
        """Another node committed for ``session_id``: its watchers here get what it wrote."""
        self._commits.sessions.catch_up(session_id)

    def follow_watched(self, hook: Callable[[str, bool], None] | None) -> list[str]:
        """``hook(session_id, watched)`` when a session's first watch here opens (True) and
        its last closes (False), and the sessions watched now: on PostgreSQL the node's
        listener hears a session's stream only meanwhile (store/listen.py). None: stop."""
        return self._commits.sessions.follow_watched(hook)

    def _events_after(self, session_id: str, after_seq: int) -> list[CommittedEvent]:
        return [
            CommittedEvent(
                e.session_id, e.seq, e.command_id, e.kind, e.raw, e.created_at.timestamp()
            )
            for e in self.read(lambda c: queries.events_after(c, session_id, after_seq, None))
        ]

    def _finished_since(self, session_id: str, since: float) -> list[CommandRecord]:
        return self.read(lambda c: queries.finished_since(c, session_id, since))

    @property
    def commit_stats(self) -> tuple[int, int]:
        """(transactions committed, writes acknowledged) since open."""
        return self._writer.batches, self._writer.writes

    # -- writes --------------------------------------------------------------------------

    def spawn(
        self,
        agent: AgentSpec,
        cwd: str,
        binding: BindingSpec | None = None,
        first_prompt: Sequence[dict[str, Any]] | None = None,
        idempotency_key: str | None = None,
        parent_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        queue_mode: str = "followup",
        limits: SubagentLimits | None = None,
        placement: Placement | None = None,
        before_commit: Callable[[SpawnResult], None] | None = None,
    ) -> SpawnResult:
        """``before_commit`` runs in the spawn's transaction, before anyone can see the
        session: what its actor needs at its start (which the supervisor's sweep may begin
        as soon as the commit is visible) is in place first. It may run more than once (a
        transaction retried on a lock, or run again with savepoints after another write of
        its group failed), each time for a new session id: it must be idempotent and cheap,
        and what it leaves for an id that never commits must be harmless."""

        def spawn(ctx: WriteContext) -> SpawnResult:
            result = ops.spawn(
                ctx,
                agent,
                cwd,
                binding,
                first_prompt,
                idempotency_key,
                parent_id=parent_id,
                metadata=metadata,
                queue_mode=queue_mode,
                max_attempts=self.options.max_attempts,
                limits=limits,
                placement=placement,
            )
            if before_commit is not None:
                before_commit(result)
            return result

        return self.write(spawn)

    def bind(self, session_id: str, spec: BindingSpec) -> BindingRecord:
        return self.write(lambda ctx: ops.bind(ctx, session_id, spec))

    def enqueue(
        self,
        session_id: str,
        kind: CommandKind,
        payload: dict[str, Any],
        idempotency_key: str | None = None,
    ) -> EnqueueResult:
        return self.write(
            lambda ctx: ops.enqueue(
                ctx, session_id, kind, payload, idempotency_key, self.options.max_attempts
            )
        )

    def claim_next(self, session_id: str) -> CommandRecord | None:
        return self.write(lambda ctx: ops.claim_next(ctx, session_id))

    def complete(self, command_id: str, result: dict[str, Any]) -> CommandRecord:
        return self.write(lambda ctx: ops.complete(ctx, command_id, result))

    def fail(self, command_id: str, error: str) -> CommandRecord:
        return self.write(lambda ctx: ops.fail(ctx, command_id, error))

    def append_events(
        self, session_id: str, command_id: str | None, events: Sequence[NewEvent]
    ) -> list[EventRecord]:
        return self.write(lambda ctx: ops.append_events(ctx, session_id, command_id, events))

    def cancel(self, session_id: str, include_queued: bool = False) -> SessionState:
        return self.write(lambda ctx: ops.cancel(ctx, session_id, include_queued))

    def close_session(self, session_id: str, reason: str = "closed") -> SessionRecord:
        return self.write(lambda ctx: ops.close_session(ctx, session_id, reason))

    def advance_checkpoint(self, binding_id: str, seq: int) -> int:
        return self.write(lambda ctx: ops.advance_checkpoint(ctx, binding_id, seq))

    def persistent_fault(self, min_s: float) -> StoreError | None:
        """The store's last refusal, when every write has failed (lock, disk full, I/O) for
        at least ``min_s`` seconds, or at once when its file was deleted or replaced under
        it (then for good); None while it takes writes."""
        if self._writer.fatal is not None:
            return self._writer.fatal
        since = self._writer.fault_since
        if since is None or time.monotonic() - since < min_s:
            return None
        return self._writer.last_fault

    def recover(self, me: str | None = None, include_mine: bool = True) -> RecoveryReport:
        """Recover interrupted work (see ``ops.recover``). Without ``include_mine``
        (a periodic sweep in a running process) it first checks on a reader and writes only
        when some dead owner left work behind."""
        if not include_mine:
            owner = me or this_owner()
            if not self.read(lambda c: queries.orphaned_sessions(c, owner, include_mine=False)):
                return RecoveryReport()
        return self.write(lambda ctx: ops.recover(ctx, me, include_mine))

    # -- reads ---------------------------------------------------------------------------

    def get_session(self, session_id: str) -> SessionRecord:
        return self.read(lambda c: queries.get_session(c, session_id))

    def session_by_key(self, spawn_key: str) -> SessionRecord | None:
        return self.read(lambda c: queries.session_by_key(c, spawn_key))

    def get_command(self, command_id: str) -> CommandRecord:
        # Fixed SQL: every wait() reads its command once (a Core select costs ~10x more).
        row = self.read_raw(lambda raw: raw.execute(hot.COMMAND_BY_ID, (command_id,)).fetchone())
        if row is None:
            raise CommandNotFound(command_id)
        return hot.command_from_tuple(tuple(row))

    def commands_of(self, session_id: str) -> list[CommandRecord]:
        return self.read(lambda c: queries.commands_of(c, session_id))

    def list_sessions(
        self,
        state: SessionState | None = None,
        parent_id: str | None = None,
        limit: int = 100,
        after_id: str | None = None,
    ) -> list[SessionRecord]:
        return self.read(lambda c: queries.list_sessions(c, state, parent_id, limit, after_id))

    def sessions_page(
        self,
        states: Sequence[SessionState] = (),
        before: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> tuple[list[SessionRecord], tuple[float, str] | None]:
        """Newest updated first, after the cursor ``before``; and the next page's cursor."""
        return self.read(lambda c: queries.sessions_page(c, states, before, limit))

    def search(self, query: SearchQuery, filters: SearchFilters, limit: int) -> list[SearchHit]:
        """Sessions whose prompts or answers match ``query``, newest match first."""
        return self.read(lambda c: search_queries.search(c, query, filters, limit))

    def events(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        def run(conn: Connection) -> list[EventRecord]:
            queries.get_session(conn, session_id)  # unknown ids raise SessionNotFound
            return queries.events_after(conn, session_id, after_seq, limit)

        return self.read(run)

    def usage(self, session_id: str) -> SessionUsage:
        """What the session's agent reported it used, and the budget that stopped it."""
        return self.read(lambda c: queries.session_usage(c, session_id))

    def command_events(self, session_id: str, command_id: str) -> list[EventRecord]:
        return self.read(lambda c: queries.command_events(c, session_id, command_id))

    def bindings_of(self, session_id: str, active_only: bool = True) -> list[BindingRecord]:
        return self.read(lambda c: queries.bindings_of(c, session_id, active_only))

    def get_binding(self, binding_id: str) -> BindingRecord | None:
        return self.read(lambda c: queries.get_binding(c, binding_id))

    def undelivered_bindings(self) -> list[BindingRecord]:
        return self.read(queries.undelivered_bindings)
