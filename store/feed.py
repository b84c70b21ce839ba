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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
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

    @cached_property
    def payload(self) -> dict[str, Any]:
        value = json.loads(self.raw) if self.parsed is None else self.parsed
        return value if isinstance(value, dict) else {"value": value}


@dataclass
class SessionCommit:
    """One commit's share of one session: its new events (seq order) and finished commands."""

    events: list[CommittedEvent] = field(default_factory=list)
    finished: list[CommandRecord] = field(default_factory=list)


FeedListener = Callable[[SessionCommit], None]


class SessionFeeds:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watchers: dict[str, list[FeedListener]] = {}

    def watch(self, session_id: str, listener: FeedListener) -> Callable[[], None]:
        """Call ``listener`` after every commit that appended to or finished a command of
        ``session_id``. Returns the function that stops it."""
        with self._lock:
            self._watchers.setdefault(session_id, []).append(listener)

        def unwatch() -> None:
            with self._lock:
                listeners = self._watchers.get(session_id, [])
                if listener in listeners:
                    listeners.remove(listener)
                if not listeners:
                    self._watchers.pop(session_id, None)

        return unwatch

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
            for listener in watched[session_id]:
                try:
                    listener(share)
                except Exception:  # a watcher's bug must not stop the others
                    log.exception("session feed listener of %s failed", session_id)
