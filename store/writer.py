"""The single writer thread with group commit.

Callers on any thread ``submit`` a write function; the writer thread takes every write that is
waiting, runs them in one ``BEGIN IMMEDIATE`` transaction (each inside its own SAVEPOINT, so one
write that raises is rolled back alone and the others still commit), commits once, and only
then acknowledges each caller (a blocking ``call`` waits on a lock, ``submit`` gets a future).
One fsync then acknowledges many writes: that is where the throughput under concurrency comes
from.

Hooks a write registers with ``WriteContext.after_commit`` run on the writer thread after the
commit, in order; an exception there is logged and never undoes the commit.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar, cast

from sqlalchemy import Connection, Engine

from state_machines.errors import StoreError, StoreUnavailable
from store import telemetry
from store.driver_errors import (
    as_damaged,
    as_unavailable,
    is_connection_level,
    is_damage,
    is_disconnect,
    own_copy,
)
from store.raw import later, raw_for
from store.write_context import Appended, Commit, WriteContext, WriteFn

# Re-exported: the write operations import these from here.
__all__ = ["Appended", "Commit", "GroupCommitWriter", "WriteContext", "WriteFn"]
from store.retry import retry_on_lock

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Request(Generic[T]):
    """One submitted write and how its caller hears the outcome: a future (``submit``), or,
    for a caller that blocks (``call``), a lock it waits on. The lock is the cheap path:
    a ``concurrent.futures.Future`` costs a condition variable, its own lock and a waiter
    lock per write, which under 64 contending threads was a fifth of the writer's CPU."""

    __slots__ = ("done", "fn", "future", "ok", "value")

    def __init__(self, fn: WriteFn[T], future: Future[T] | None) -> None:
        self.fn = fn
        self.future = future
        self.done: threading.Lock | None = None
        if future is None:
            self.done = threading.Lock()
            self.done.acquire()  # released by the writer once the outcome is set
        self.ok = False
        self.value: Any = None

    def start(self) -> bool:
        """False if the caller cancelled the future before the write ran."""
        return self.future is None or self.future.set_running_or_notify_cancel()

    def resolve(self, ok: bool, value: Any) -> None:
        if not ok:
            telemetry.write_failed(value)
        future = self.future
        if future is None:
            self.ok, self.value = ok, value
            assert self.done is not None
            self.done.release()
        elif ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def wait(self, timeout: float | None) -> T:
        assert self.done is not None
        if not self.done.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            raise TimeoutError(f"the write did not commit within {timeout} s")
        if self.ok:
            return cast(T, self.value)
        raise self.value


_STOP = object()


class GroupCommitWriter:
    """Owns the write connection; see the module docstring."""

    def __init__(
        self,
        engine: Engine,
        path: str,
        lock_timeout_s: float,
        on_commit: Callable[[Commit], None] | None = None,
        max_batch: int = 512,
        begin_sql: str = "BEGIN IMMEDIATE",
        watch_file: bool = True,
        notify_sql: str | None = None,
    ) -> None:
        self._engine = engine
        self._begin_sql = begin_sql
        # PostgreSQL: a statement that tells other nodes, on commit, which sessions a group
        # appended to or finished commands of (their session feeds catch up; store/feed.py).
        self._notify_sql = notify_sql
        # SQLite: the file is checked before each group (deleted or replaced under us?).
        self._watch_file = watch_file
        self._on_commit = on_commit
        self._path = path
        self._lock_timeout_s = lock_timeout_s
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="store-writer", daemon=True)
        self._closed = False
        self._close_lock = threading.Lock()
        self.batches = 0  # transactions committed (for benchmarks and tests)
        # Since when (monotonic) every batch failed as a whole (lock, disk, I/O), and the
        # last such error; None again after the next commit.
        self.fault_since: float | None = None
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the open file
        # Set for good once the file was found deleted or replaced: nothing is written again.
        self.fatal: StoreError | None = None
        self.last_fault: StoreUnavailable | None = None
        self.writes = 0  # writes acknowledged
        self.notified = 0  # PostgreSQL: per-session notifications its commits sent
        # PostgreSQL: the server process of the connection the groups commit on, so that
        # this node's LISTEN can skip what its own commits sent (store/listen.py).
        self.backend_pid: int | None = None
        self._thread.start()

    def submit(self, fn: WriteFn[T]) -> Future[T]:
        future: Future[T] = Future()
        self._put(_Request(fn, future))
        return future

    def call(self, fn: WriteFn[T], timeout: float | None = None) -> T:
        """Submit ``fn`` and block until the transaction holding it committed; its value,
        or its exception raised here. ``TimeoutError`` after ``timeout`` seconds (the write
        may still commit later)."""
        request: _Request[T] = _Request(fn, None)
        self._put(request)
        return request.wait(timeout)

    def _put(self, request: _Request[Any]) -> None:
        with self._close_lock:
            if self._closed:
                raise StoreError("the store is closed", path=self._path)
            self._queue.put(request)

    def close(self) -> None:
        """Finish every write already submitted, then stop the thread."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    # -- writer thread -------------------------------------------------------------------

    def _run(self) -> None:
        with self._engine.connect() as conn:
            # The file exists once the driver is connected (SQLite creates it on open).
            if self._watch_file:
                self._identity = _file_identity(self._path)
            stopping = False
            while not stopping:
                first = self._queue.get()
                if first is _STOP:
                    break
                batch: list[_Request[Any]] = [first]
                while len(batch) < self._max_batch:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stopping = True
                        break
                    batch.append(item)
                self._commit_batch(conn, batch)

    def _commit_batch(self, conn: Connection, batch: list[_Request[Any]]) -> None:
        live = [r for r in batch if r.start()]
        gone = self.fatal or self._file_gone()
        if gone is not None:
            self.fatal = gone
            for req in live:
                req.resolve(False, own_copy(gone))
            return
        began = time.perf_counter()
        try:
            outcomes, hooks, commit = retry_on_lock(
                lambda: self._run_transaction(conn, live, self._begin_sql, self._notify_sql),
                self._lock_timeout_s,
                self._path,
            )
        except BaseException as exc:
            telemetry.WRITES_REFUSED.inc(len(live))
            if is_disconnect(exc):
                # PostgreSQL: the next group gets a new connection (the pool reconnects).
                conn.invalidate()
            if is_damage(exc):
                damaged = as_damaged(exc, self._path)
                self.refuse_for_good(damaged)
                for req in live:
                    req.resolve(False, own_copy(damaged))
                return
            error = as_unavailable(exc, self._path)
            if self.fault_since is None:
                self.fault_since = time.monotonic()
            self.last_fault = error
            for req in live:
                req.resolve(False, own_copy(error))
            return
        self.fault_since = None  # the store takes writes again
        if self._notify_sql is not None:
            self._note_backend(conn)
            self.notified += len(_notified_sessions(commit))
        self.batches += 1
        self.writes += len(live)
        telemetry.COMMIT_SECONDS.observe(time.perf_counter() - began)
        telemetry.COMMIT_GROUP_SIZE.observe(len(live))
        # Callers first: a hook that is slow must not delay an acknowledgement.
        for req, (ok, value) in zip(live, outcomes, strict=True):
            req.resolve(ok, value)
        if commit and self._on_commit is not None:
            on_commit = self._on_commit
            hooks.append(lambda: on_commit(commit))
        for hook in hooks:
            try:
                hook()
            except Exception:  # a notification must never undo or block a commit
                log.exception("after-commit hook failed")

    def _note_backend(self, conn: Connection) -> None:
        """Which server process committed (it changes only when the pool reconnected)."""
        try:
            driver: Any = conn.connection.driver_connection
            self.backend_pid = int(driver.info.backend_pid)
        except Exception:  # only an accelerator's filter: never a reason to fail a commit
            self.backend_pid = None

    def refuse_for_good(self, error: StoreError) -> None:
        """From now on every write is refused with ``error`` (the file is gone or damaged:
        a write could only be lost or land on top of the damage)."""
        if self.fatal is None:
            log.error("store %s: %s; refusing writes", self._path, error)
            self.fatal = error

    def _file_gone(self) -> StoreError | None:
        """The store's file deleted or replaced under the open connection: SQLite would go on
        writing to the unlinked inode, and every write acknowledged from then on would be
        lost with it. Refused instead, loudly (one ``stat`` per batch)."""
        if self._identity is None:
            return None
        if _file_identity(self._path) == self._identity:
            return None
        log.error("store %s was deleted or replaced while open; refusing writes", self._path)
        return StoreError(
            f"the store file {self._path} was deleted or replaced while this process had it "
            "open; writes are refused (they would be lost). Restore the file or restart on "
            "the new one",
            path=self._path,
        )

    @staticmethod
    def _run_transaction(
        conn: Connection, batch: list[_Request[Any]], begin_sql: str, notify_sql: str | None
    ) -> tuple[list[tuple[bool, Any]], list[Callable[[], None]], Commit]:
        """Run the batch in one transaction. Optimistically without savepoints (each costs
        as much as a small write); if any write raises, roll back and run the batch again
        with a savepoint around each write, so only the failing ones are undone."""
        result = GroupCommitWriter._attempt(conn, batch, begin_sql, notify_sql, isolate=False)
        if result is None:
            result = GroupCommitWriter._attempt(conn, batch, begin_sql, notify_sql, isolate=True)
            assert result is not None
        return result

    @staticmethod
    def _attempt(
        conn: Connection,
        batch: list[_Request[Any]],
        begin_sql: str,
        notify_sql: str | None,
        isolate: bool,
    ) -> tuple[list[tuple[bool, Any]], list[Callable[[], None]], Commit] | None:
        outcomes: list[tuple[bool, Any]] = []
        hooks: list[Callable[[], None]] = []
        commit = Commit()
        lone = len(batch) == 1
        raw = raw_for(conn)
        # BEGIN/COMMIT straight on the driver: SQLAlchemy's begin/commit path costs ~5x the
        # statements themselves. Core statements inside autobegin on the same connection
        # (see store/engine.py), and SQLAlchemy's bookkeeping is reset below. On PostgreSQL
        # BEGIN, savepoints, their releases and the notifications go out with the statement
        # after them (store/raw.py ``later``): the COMMIT carries the notifications.
        later(raw, begin_sql)
        try:
            for req in batch:
                ctx = WriteContext(conn, raw)
                if isolate:
                    later(raw, "SAVEPOINT w")  # a fixed name: nothing to compile
                try:
                    value = req.fn(ctx)
                except Exception as exc:  # the caller's error, not the batch's
                    if is_connection_level(exc):
                        raise
                    if isolate:
                        raw.execute("ROLLBACK TO w")
                        later(raw, "RELEASE w")
                    elif lone:
                        raw.execute("ROLLBACK")  # nothing else to keep
                    else:
                        raw.execute("ROLLBACK")
                        return None  # run again with savepoints
                    outcomes.append((False, exc))
                else:
                    if isolate:
                        later(raw, "RELEASE w")
                    outcomes.append((True, value))
                    hooks.extend(ctx._hooks)
                    commit.add(ctx)
            if notify_sql is not None and commit:
                for session_id in _notified_sessions(commit):
                    later(raw, notify_sql, (session_id,))
            if raw.in_transaction:
                raw.execute("COMMIT")
        except BaseException as exc:
            if raw.in_transaction and not is_disconnect(exc):
                raw.execute("ROLLBACK")
            raise
        finally:
            if conn.in_transaction():
                try:
                    conn.rollback()  # only SQLAlchemy's bookkeeping: the driver is done
                except Exception as exc:
                    if not is_disconnect(exc):
                        raise
        return outcomes, hooks, commit


def _notified_sessions(commit: Commit) -> set[str]:
    """The sessions a group appended to or finished commands of: one notification each."""
    return commit.sessions | {r.session_id for r in commit.finished_records}


def _file_identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino
