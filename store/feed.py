"""Session feeds: what each commit appended to a session's log, and the commands it finished,
handed to that session's watchers in commit order.

A watcher (``acpctl serve`` streaming a turn to its client, a host following a session) gets
the committed events from memory instead of reading the log back after every commit. The
writer records references only (see ``WriteContext.appended``); records are built here, and
only for sessions somebody watches.

Each watcher has a mailbox of its own (``SessionWatch``). The writer thread only appends a
commit's share to it and, when it was empty, calls the watcher's ``wake`` (which must be as
short as ``loop.call_soon_threadsafe`` or ``Event.set``); the watcher ``take``s on its own
thread. So a slow watcher delays neither the writer nor any other watcher. A watcher that
falls more than ``limit`` events behind has its queued events dropped and catches up from
the log on its next ``take``, after the last event it took: no gap and no duplicate, since
every take hands on only the seqs after the last one handed on.
"""

from __future__ import annotations

import asyncio
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


Wake = Callable[[], None]

# How many events a watcher's mailbox holds before it is dropped and the watcher reads the
# log instead: a few turns of a streaming agent, so a watcher that keeps up never reads.
WATCH_LIMIT = 10_000

# How far back (seconds) a catch-up looks for commands another node finished: wider than
# any clock difference between nodes; the ids already handed on are skipped.
_FINISHED_WINDOW_S = 300.0

Keep = Callable[[CommittedEvent], bool]
ReadAfter = Callable[[str, int], list[CommittedEvent]]
ReadFinished = Callable[[str, float], list[CommandRecord]]
# Told when a session's first watch opens (True) and its last closes (False): on PostgreSQL
# the node's listener LISTENs to that session's channel only meanwhile (store/listen.py).
WatchedHook = Callable[[str, bool], None]


class SessionWatch:
    """One watcher's mailbox of one session's commits (see the module's docstring).

    ``keep`` picks the events the watcher wants (None: all); the others are never queued and
    never wake it, but count as handed on, so that a gap in the seqs still shows (another
    writer's commit that this process did not publish: the log has it). ``finished=False``:
    the finished commands are not wanted either."""

    def __init__(
        self,
        feeds: SessionFeeds,
        session_id: str,
        wake: Wake,
        last_seq: int | None,
        limit: int,
        keep: Keep | None,
        finished: bool,
    ) -> None:
        self.session_id = session_id
        self._wants_finished = finished
        self._feeds = feeds
        self._wake = wake
        self._limit = limit
        self._keep = keep
        self._lock = threading.Lock()
        self._shares: list[SessionCommit] = []
        self._queued = 0  # events in ``_shares``
        # Every event up to ``_position`` was handed on (or not wanted); None: no position
        # known yet (SQLite, nothing taken: whatever is offered is new).
        self._position = last_seq
        self._offered = last_seq  # the last seq offered, wanted or not
        self._behind = False  # events were dropped, or another writer's commit: read the log
        self._finished_seen: set[str] = set()

    def take(self) -> SessionCommit:
        """Everything wanted committed since the last take, events in seq order, each once
        (on the watcher's own thread: it may read the log)."""
        with self._lock:
            shares, self._shares, self._queued = self._shares, [], 0
            behind, self._behind = self._behind, False
            position, covered = self._position, self._offered
        finished = [r for share in shares for r in share.finished]
        if behind and position is not None and self._feeds.read_after is not None:
            # The log has it all: what was dropped or never published here, and what was
            # queued meanwhile (a commit is published after it committed, so the read
            # sees it; the next take skips what it handed on already). The finished
            # commands are read first: a command's events commit with or before its end,
            # so the events read after it have them all. (The other order can hand on an
            # end whose last events committed between the two reads, and a turn's stream
            # would stop without them.)
            if self._wants_finished and self._feeds.read_finished is not None:
                since = time.time() - _FINISHED_WINDOW_S
                finished += self._feeds.read_finished(self.session_id, since)
            events = self._feeds.read_after(self.session_id, position)
            covered = events[-1].seq if events else position
            if self._keep is not None:
                events = [e for e in events if self._keep(e)]
        else:
            events = [e for share in shares for e in share.events]
        if position is not None:
            events = [e for e in events if e.seq > position]
        with self._lock:
            if covered is not None and (self._position is None or covered > self._position):
                self._position = covered
            fresh = []
            for record in finished:  # the mailbox and the log may both have one
                if record.id not in self._finished_seen:
                    self._finished_seen.add(record.id)
                    fresh.append(record)
        return SessionCommit(events=events, finished=fresh)

    def discard(self) -> None:
        """Empty the mailbox without reading anything: for a watcher that wants only the
        wake-up and reads the log itself (``ControlPlane.events``)."""
        with self._lock:
            self._shares, self._queued, self._behind = [], 0, False
            self._position = self._offered

    @property
    def reads_log(self) -> bool:
        """The next take reads the log (a loop takes it in a worker thread then)."""
        return self._behind

    async def take_async(self) -> SessionCommit:
        """``take`` for a watcher on an asyncio loop: a take that reads the log runs in a
        worker thread, so the loop never waits for the store."""
        if self._behind:
            return await asyncio.to_thread(self.take)
        return self.take()

    def close(self) -> None:
        self._feeds.unwatch(self)

    # -- the writer thread (or the listen thread, for another node's commit) ---------------

    def offer(self, share: SessionCommit) -> None:
        events = share.events
        if self._keep is not None:
            events = [e for e in events if self._keep(e)]
        if not self._wants_finished and share.finished:
            share = SessionCommit(share.events)
        with self._lock:
            was_idle = not self._shares and not self._behind
            if share.events:
                if self._offered is not None and share.events[0].seq > self._offered + 1:
                    self._mark_behind()  # a commit this process did not publish
                self._offered = share.events[-1].seq
            if self._behind:
                # The log has the events; the finished records are kept.
                if share.finished:
                    self._shares.append(SessionCommit(finished=share.finished))
            elif events or share.finished:
                self._shares.append(
                    share if events is share.events else SessionCommit(events, share.finished)
                )
                self._queued += len(events)
                if self._queued > self._limit:
                    self._fall_behind()
            wake = was_idle and (bool(self._shares) or self._behind)
        if wake:
            self._wake_up()

    def stale(self) -> None:
        """Something this process was not told of was committed: read the log next take."""
        with self._lock:
            was_idle = not self._shares and not self._behind
            if self._position is None:
                return  # no position to read after (only PostgreSQL calls this; it has one)
            self._behind = True
        if was_idle:
            self._wake_up()

    def stale_before(self, last_seq: int) -> None:
        """The log ends at ``last_seq`` (read after this watch opened): read it next take if
        that is past what this watch was offered (SQLite: another process's commit that fell
        between the watch's position read and its opening, store/sqlite_watch.py)."""
        with self._lock:  # offered from memory, or taken from the log: known either way
            known = [s for s in (self._offered, self._position) if s is not None]
        if known and last_seq > max(known):
            self.stale()

    def _mark_behind(self) -> None:
        """(Under the lock.) The next take reads the log after the position."""
        if self._position is None:
            first = next((s.events[0].seq for s in self._shares if s.events), None)
            if first is None and self._offered is not None:
                first = self._offered + 1
            self._position = None if first is None else first - 1
        self._shares = [SessionCommit(finished=s.finished) for s in self._shares if s.finished]
        self._queued = 0
        self._behind = self._position is not None

    def _fall_behind(self) -> None:
        self._mark_behind()
        log.warning(
            "a watcher of session %s fell over %d events behind; it reads the log instead",
            self.session_id,
            self._limit,
        )

    def _wake_up(self) -> None:
        try:
            self._wake()
        except Exception:  # a watcher's bug must not stop the others
            log.exception("session feed watcher of %s failed to wake", self.session_id)


class SessionFeeds:
    """The watchers of each session: a commit of this process is published from memory
    (``publish``); on PostgreSQL a commit of another node marks its watchers stale once its
    notification arrives (``catch_up``), and they read the log on their next take."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: dict[str, list[SessionWatch]] = {}
        # Reads for catching up (the Store sets them): events after a seq, and the
        # session's commands finished since a time.
        self.read_after: ReadAfter | None = None
        self.read_finished: ReadFinished | None = None
        self._on_watched: WatchedHook | None = None

    def follow_watched(self, hook: WatchedHook | None) -> list[str]:
        """From now on ``hook(session_id, watched)`` when a session's first watch opens and
        when its last closes (under this lock, so in order; it must only note it); returns
        the sessions watched now. None: no longer."""
        with self._lock:
            self._on_watched = hook
            return list(self._watches)

    def watch(
        self,
        session_id: str,
        wake: Wake,
        last_seq: int | None = None,
        limit: int = WATCH_LIMIT,
        keep: Keep | None = None,
        finished: bool = True,
    ) -> SessionWatch:
        """A mailbox of every commit that appends to ``session_id`` or finishes one of its
        commands after now (``last_seq``: the log's end now, when known). ``wake`` is called
        when it stops being empty."""
        watch = SessionWatch(self, session_id, wake, last_seq, limit, keep, finished)
        with self._lock:
            watches = self._watches.setdefault(session_id, [])
            watches.append(watch)
            if len(watches) == 1 and self._on_watched is not None:
                self._on_watched(session_id, True)
        return watch

    def unwatch(self, watch: SessionWatch) -> None:
        with self._lock:
            watches = self._watches.get(watch.session_id, [])
            if watch in watches:
                watches.remove(watch)
            if watches:
                return
            gone = self._watches.pop(watch.session_id, None) is not None
            if gone and self._on_watched is not None:
                self._on_watched(watch.session_id, False)

    def watched(self, session_id: str) -> bool:
        return session_id in self._watches

    def publish(self, commit: Commit) -> None:
        """On the writer thread, after the commit."""
        if not self._watches:  # unlocked peek: the common case costs one dict check
            return
        with self._lock:
            watched = {sid: list(ws) for sid, ws in self._watches.items()}
        shares: dict[str, SessionCommit] = {}
        for session_id, first, command_id, frames, created, _ in commit.appended:
            if session_id in watched:
                share = shares.setdefault(session_id, SessionCommit())
                share.events.extend(
                    CommittedEvent(session_id, first + i, command_id, kind, text, created, parsed)
                    for i, (kind, text, parsed) in enumerate(frames)
                )
        for record in commit.finished_records:
            if record.session_id in watched:
                shares.setdefault(record.session_id, SessionCommit()).finished.append(record)
        # Appends run in seq order inside a transaction, so each share is in seq order. One
        # share object goes to every watcher of its session: a take never changes it.
        for session_id, share in shares.items():
            for watch in watched[session_id]:
                watch.offer(share)

    def catch_up(self, session_id: str) -> None:
        """Another node committed for ``session_id``: its watchers read the log next take."""
        with self._lock:
            watches = list(self._watches.get(session_id, ()))
        for watch in watches:
            watch.stale()

    def catch_up_to(self, session_id: str, last_seq: int) -> None:
        """``session_id``'s log ends at ``last_seq``: its watchers that were offered less
        read the log next take (``SessionWatch.stale_before``)."""
        with self._lock:
            watches = list(self._watches.get(session_id, ()))
        for watch in watches:
            watch.stale_before(last_seq)
