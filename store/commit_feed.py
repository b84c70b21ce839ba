"""Where each commit of this process's writer is published, once, to everyone who listens.

Run on the writer thread right after the commit (``GroupCommitWriter(on_commit=...)``), in this
order: the commands it finished are counted (metrics); the session feeds' mailboxes get the
events and finished records of the sessions they watch (store/feed.py); the waiters of the
commands it finished get their records (store/command_waits.py); then the listeners of the appends
themselves (delivery: its projectors take the events from the commit), then those told only
which sessions appended and which commands finished (the subagent bridge, the async API).
Listeners must be short: hand the work to another thread or loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TypeVar

from store import telemetry
from store.command_waits import CommandWaits
from store.feed import WATCH_LIMIT, Keep, SessionFeeds, SessionWatch, Wake
from store.records import CommandRecord
from store.write_context import Appended, Commit

IdsListener = Callable[[set[str]], None]
AppendsListener = Callable[[Sequence[Appended]], None]
L = TypeVar("L")


class CommitFeed:
    def __init__(self) -> None:
        self.sessions = SessionFeeds()
        self.commands = CommandWaits()
        self._lock = threading.Lock()
        self._appended: list[IdsListener] = []
        self._finished: list[IdsListener] = []
        self._appends: list[AppendsListener] = []

    def on_appended(self, listener: IdsListener) -> Callable[[], None]:
        return self._add(self._appended, listener)

    def on_appends(self, listener: AppendsListener) -> Callable[[], None]:
        """``listener(appended)``: the commit's appends themselves (``Appended``), not
        copies: read them, never change them."""
        return self._add(self._appends, listener)

    def on_finished(self, listener: IdsListener) -> Callable[[], None]:
        return self._add(self._finished, listener)

    def watch(
        self,
        session_id: str,
        wake: Wake,
        last_seq: int | None,
        limit: int = WATCH_LIMIT,
        keep: Keep | None = None,
        finished: bool = True,
    ) -> SessionWatch:
        return self.sessions.watch(session_id, wake, last_seq, limit, keep, finished)

    def expect(self, command_id: str) -> Future[CommandRecord]:
        return self.commands.expect(command_id)

    def forget(self, command_id: str, future: Future[CommandRecord]) -> None:
        self.commands.forget(command_id, future)

    def publish(self, commit: Commit) -> None:
        finished_records = commit.finished_records
        with self._lock:
            appended = list(self._appended) if commit.appended else []
            appends = list(self._appends) if commit.appended else []
            finished = list(self._finished) if finished_records else []
        if finished_records:
            # Counted before anyone is told: a client that got its answer and then scrapes
            # /metrics sees its turn counted (the feed wakes serve's reply).
            telemetry.commands_finished(finished_records)
        self.sessions.publish(commit)
        if finished_records:
            self.commands.publish(finished_records)
        for appends_listener in appends:
            appends_listener(commit.appended)
        if appended:
            session_ids = commit.sessions
            for listener in appended:
                listener(session_ids)
        if finished:
            command_ids = commit.finished
            for listener in finished:
                listener(command_ids)

    def _add(self, listeners: list[L], listener: L) -> Callable[[], None]:
        with self._lock:
            listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in listeners:
                    listeners.remove(listener)

        return remove
