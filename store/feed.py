"""Session feeds: what each commit appended to a session's log, and the commands it finished,
handed to that session's watchers right after the commit, in commit order.

A watcher (``acpctl serve`` streaming a turn to its client, a host following a session) gets
the committed events from memory instead of reading the log back after every commit. The
writer records references only (see ``WriteContext.appended``); records are built here, and
only for sessions somebody watches.

Listeners run on the store's writer thread: keep them short (hand the work to a loop).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from store.records import CommandRecord
from store.writer import Commit

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommittedEvent:
    """One event as committed (the log's row without its global id, which the recorder's
    batched inserts do not read back). Satisfies ``EventLike``."""

    session_id: str
    seq: int
    command_id: str | None
    kind: str
    raw: str  # the payload's JSON text exactly as appended
    created: float  # epoch seconds, as stored
    parsed: Any = None  # the writer's own parse of ``raw``, when it had one (read-only)

    @property
    def created_at(self) -> datetime:
        return datetime.fromtimestamp(self.created, UTC)

    @property
    def payload(self) -> dict[str, Any]:
        # Not a cached_property: on Python 3.11 its lock costs more than the parse it saves
        # on the hot path, where the writer's parse is there already.
        value = self.parsed
        if value is None:
            value = json.loads(self.raw)
            object.__setattr__(self, "parsed", value)
        return value if isinstance(value, dict) else {"value": value}


@dataclass
class SessionCommit:
    """One commit's share of one session: its new events (seq order) and finished commands."""

    events: list[CommittedEvent] = field(default_factory=list)
    finished: list[CommandRecord] = field(default_factory=list)


FeedListener = Callable[[SessionCommit], None]


# How far back (seconds) a catch-up looks for commands another node finished: wider than
# any clock difference between nodes; the ids already handed on are skipped.
_FINISHED_WINDOW_S = 300.0


class SessionFeeds:
    """The watchers of each session, and what each session's watchers were handed last:
    a commit of this process is published from memory (``publish``); on PostgreSQL a commit
    of another node is read back once its notification arrives (``catch_up``). Both hand on
    only events after the last one handed on, so each event reaches a watcher once, in seq
    order, whichever way it came."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watchers: dict[str, list[FeedListener]] = {}
        self._last: dict[str, int] = {}  # last seq handed on, per watched session
        self._finished: dict[str, set[str]] = {}  # finished command ids handed on
        # Reads for ``catch_up`` (the Store sets them): events after a seq, and the
        # session's commands finished since a time.
        self.read_after: Callable[[str, int], list[CommittedEvent]] | None = None
        self.read_finished: Callable[[str, float], list[CommandRecord]] | None = None

    def watch(
        self, session_id: str, listener: FeedListener, last_seq: int | None = None
    ) -> Callable[[], None]:
        """Call ``listener`` after every commit that appended to or finished a command of
        ``session_id`` (``last_seq``: the log's end now; what comes after it is handed on).
        Returns the function that stops it."""
        with self._lock:
            self._watchers.setdefault(session_id, []).append(listener)
            if last_seq is not None:
                self._last[session_id] = max(self._last.get(session_id, 0), last_seq)
            self._finished.setdefault(session_id, set())

        def unwatch() -> None:
            with self._lock:
                listeners = self._watchers.get(session_id, [])
                if listener in listeners:
                    listeners.remove(listener)
                if not listeners:
                    self._watchers.pop(session_id, None)
                    self._last.pop(session_id, None)
                    self._finished.pop(session_id, None)

        return unwatch

    def watched(self, session_id: str) -> bool:
        return session_id in self._watchers

    def publish(self, commit: Commit) -> None:
        """On the writer thread, after the commit."""
        if not self._watchers:  # unlocked peek: the common case costs one dict check
            return
        with self._lock:
            watched = {sid: list(ls) for sid, ls in self._watchers.items()}
        shares: dict[str, SessionCommit] = {}
        for session_id, first, command_id, frames, created in commit.appended:
            if session_id in watched:
                share = shares.setdefault(session_id, SessionCommit())
                share.events.extend(
                    CommittedEvent(session_id, first + i, command_id, kind, text, created, parsed)
                    for i, (kind, text, parsed) in enumerate(frames)
                )
        for record in commit.finished_records:
            if record.session_id in watched:
                shares.setdefault(record.session_id, SessionCommit()).finished.append(record)
        # Appends run in seq order inside a transaction, so each share is in seq order.
        for session_id, share in shares.items():
            self._hand_on(session_id, share, watched[session_id])

    def catch_up(self, session_id: str) -> None:
        """Another node committed for ``session_id``: hand its watchers what the log has
        after the last event they were handed (on the listener's thread)."""
        if session_id not in self._watchers or self.read_after is None:
            return
        with self._lock:
            listeners = list(self._watchers.get(session_id, ()))
            last = self._last.get(session_id, 0)
        if not listeners:
            return
        share = SessionCommit(events=self.read_after(session_id, last))
        if self.read_finished is not None:
            share.finished = self.read_finished(session_id, time.time() - _FINISHED_WINDOW_S)
        self._hand_on(session_id, share, listeners)

    def _hand_on(
        self, session_id: str, share: SessionCommit, listeners: list[FeedListener]
    ) -> None:
        with self._lock:
            last = self._last.get(session_id)
            if last is not None:
                fresh = [e for e in share.events if e.seq > last]
                if fresh and fresh[0].seq > last + 1 and self.read_after is not None:
                    # A gap: another node's commit not caught up yet; the log has it.
                    fresh = [e for e in self.read_after(session_id, last) if e.seq > last]
                share.events = fresh
            if share.events:
                self._last[session_id] = share.events[-1].seq
            seen = self._finished.setdefault(session_id, set())
            share.finished = [r for r in share.finished if r.id not in seen]
            seen.update(r.id for r in share.finished)
            if not share.events and not share.finished:
                return
            # Handed on under the lock: two threads (the writer, the listener) never
            # interleave one session's events.
            for listener in listeners:
                try:
                    listener(share)
                except Exception:  # a watcher's bug must not stop the others
                    log.exception("session feed listener of %s failed", session_id)
