"""Where each commit of this process's writer is published, once, to everyone who listens.

Run on the writer thread right after the commit (``GroupCommitWriter(on_commit=...)``), in this
order: the commands it finished are counted (metrics); the session feeds' mailboxes get the
events and finished records of the sessions they watch (store/feed.py); the waiters of the
commands it finished get their records (store/command_waits.py); then the listeners of the appends
themselves and of the bindings created (delivery: its projectors take the events from the
commit, and learn a new session's bindings from it). Everyone gets the
committed data itself, none a bare "this changed" to read back. Subscribe through
``Store.watch`` (store/watch.py). Listeners must be short: hand the work to another thread
or loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from store import telemetry
from store.command_waits import CommandWaits
from store.feed import SessionFeeds
from store.records import BindingRecord
from store.write_context import Appended, Commit

AppendsListener = Callable[[Sequence[Appended], Sequence[BindingRecord]], None]


class CommitFeed:
    def __init__(self) -> None:
        self.sessions = SessionFeeds()
        self.commands = CommandWaits()
        self._lock = threading.Lock()
        self._appends: list[AppendsListener] = []

    def on_appends(self, listener: AppendsListener) -> Callable[[], None]:
        """``listener(appended, bound)``: the commit's appends (``Appended``) and the
        bindings it created, themselves, not copies: read them, never change them. Returns
        the function that removes it."""
        with self._lock:
            self._appends.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._appends:
                    self._appends.remove(listener)

        return remove

    def publish(self, commit: Commit) -> None:
        finished_records = commit.finished_records
        if finished_records:
            # Counted before anyone is told: a client that got its answer and then scrapes
            # /metrics sees its turn counted (the feed wakes serve's reply).
            telemetry.commands_finished(finished_records)
        self.sessions.publish(commit)
        if finished_records:
            self.commands.publish(finished_records)
        if commit.appended or commit.bound:
            with self._lock:
                listeners = list(self._appends)
            for listener in listeners:
                listener(commit.appended, commit.bound)
