"""SQLite: hear another process's commits to a watched session (PostgreSQL has ``LISTEN``).

Several control-plane processes may share one SQLite file (two ``acpctl serve --listen``, a
host and a ``serve``). A session watcher (store/feed.py) gets this process's commits from
its writer's memory; another process's commits reach nobody here. So while this process has
any session watcher open, one thread checks ``PRAGMA data_version`` on a connection of its
own every ``interval_s`` and, when it changed, marks every watched session stale
(``SessionFeeds.catch_up``): the watchers read the log after their last seq on their next
take, with no gap and no duplicate, as on PostgreSQL after a notification.

``data_version`` changes, for one connection, when any *other* connection committed to the
file: another process's, and this process's own writer's too. The two cannot be told apart
here (the writer's connection would, but it belongs to the writer thread), so a change that
only this process's writer made costs one log read per watched session, at most once per
interval: measured in docs/benchmarks.md. The check itself opens a read transaction and
looks at the WAL index header: a few microseconds, no page of the data read.

With no session watched the thread waits on a condition without a timeout: no wake-up, no
work. It starts with the first watch ever and is parked again when the last watch closes.

A session whose first watch opens is checked once on the thread's next round: its last seq
(read on this connection) against what its watchers know. A commit that fell between the
watch's position read and its registration is read from the log then, never missed.

Why 50 ms: a follower sees another process's update within a twentieth of a second plus a
log read, below what a person watching a stream notices; 20 checks a second cost about a
ten-thousandth of a core; a streaming agent commits every few tens of milliseconds, so one
catch-up reads several of its commits at once. Set ``ACPCTL_SQLITE_WATCH_POLL_S`` (seconds;
0 turns it off: other processes' updates then arrive by the callers' slow fallback reads).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading

from store.feed import SessionFeeds
from store.hot_sql import SESSION_LAST_SEQ

log = logging.getLogger(__name__)

POLL_S = 0.05
POLL_ENV = "ACPCTL_SQLITE_WATCH_POLL_S"
_BUSY_TIMEOUT_MS = 200  # a read waits this long for a WAL recovery or a checkpoint restart


def poll_interval() -> float:
    """The interval set for this process (``ACPCTL_SQLITE_WATCH_POLL_S``), 0: off."""
    text = os.environ.get(POLL_ENV, "").strip()
    if not text:
        return POLL_S
    try:
        return max(0.0, float(text))
    except ValueError:
        log.warning("%s=%r is not a number of seconds; using %s", POLL_ENV, text, POLL_S)
        return POLL_S


class OtherWriters:
    """The poller of one store's SQLite file (see the module docstring). ``polls`` and
    ``changes`` count its rounds and the changes it saw (for tests and benchmarks)."""

    def __init__(self, path: str, feeds: SessionFeeds, interval_s: float) -> None:
        self._path = path
        self._feeds = feeds
        self._interval_s = interval_s
        self._cond = threading.Condition()
        self._watched: set[str] = set()
        self._fresh: set[str] = set()  # newly watched: compare their last seq once
        self._closed = False
        self._thread: threading.Thread | None = None
        self.polls = 0
        self.changes = 0
        for session_id in feeds.follow_watched(self._on_watched):
            self._on_watched(session_id, True)

    @property
    def polling(self) -> bool:
        """Whether it checks the file now (some session is watched)."""
        with self._cond:
            return bool(self._watched) and not self._closed

    def close(self) -> None:
        self._feeds.follow_watched(None)
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(5)

    def _on_watched(self, session_id: str, watched: bool) -> None:
        """The feeds' hook (under their lock: only note it, and wake the thread)."""
        with self._cond:
            if not watched:
                self._watched.discard(session_id)
                self._fresh.discard(session_id)
                return
            self._watched.add(session_id)
            self._fresh.add(session_id)
            if self._closed:
                return
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="store-sqlite-watch", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    # -- the polling thread ----------------------------------------------------------------

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            self._poll(conn)
        except Exception:  # the watchers fall back to their callers' slow re-reads
            log.exception("watching %s for other processes' commits failed", self._path)
        finally:
            if conn is not None:
                conn.close()

    def _poll(self, conn: sqlite3.Connection) -> None:
        version: int | None = None  # None: no baseline (just started, or was parked)
        while True:
            with self._cond:
                while not self._watched and not self._closed:
                    version = None
                    self._cond.wait()  # parked: nothing watched, no wake-up
                if self._closed:
                    return
                watched = list(self._watched)
                fresh, self._fresh = self._fresh, set()
            # The baseline first, the fresh sessions' ends after: a commit after their
            # read changes the version, one before it is in what they read.
            now = self._data_version(conn)
            if version is not None and (now != version or now == -1):
                self.changes += 1
                for session_id in watched:
                    self._feeds.catch_up(session_id)
            version = now
            for session_id in fresh:
                last = self._last_seq(conn, session_id)
                if last is None:
                    self._feeds.catch_up(session_id)  # not read: the log tells
                else:
                    self._feeds.catch_up_to(session_id, last)
            self.polls += 1
            with self._cond:
                if not self._closed and not self._fresh:
                    self._cond.wait(self._interval_s)

    @staticmethod
    def _data_version(conn: sqlite3.Connection) -> int:
        """-1 (no version SQLite gives) when the file could not be read this time: a
        change, and the next version read is one again, so nothing falls in between."""
        try:
            return int(conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error as exc:
            log.warning("PRAGMA data_version failed (%s); catching the watchers up", exc)
            return -1

    @staticmethod
    def _last_seq(conn: sqlite3.Connection, session_id: str) -> int | None:
        """None: not read (an unknown session, or the read failed)."""
        with contextlib.suppress(sqlite3.Error):
            row = conn.execute(SESSION_LAST_SEQ, (session_id,)).fetchone()
            return None if row is None else int(row[0])
        return None
