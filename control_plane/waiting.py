"""Blocking waits on store commits: a command reaching a final state, new events of a session.

Told by the commit itself, with no re-read per commit: a command's waiter gets the finished
record from the commit that finishes it (store/command_waits.py); an events follower is woken
only by commits of its own session (the session feed) and then reads what is new. What another
process or node commits is not told here, so both also re-read at ``FALLBACK_S``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from state_machines import COMMAND_MACHINE
from state_machines.event_kinds import EventKind
from store import CommandRecord, EventRecord, Store

# How often a waiter looks at the store itself, for commits of other processes or nodes.
FALLBACK_S = 0.5


class Waiters:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()

    def command(self, command_id: str, timeout: float | None) -> CommandRecord:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._store.watch.command(command_id) as finished:
            command = self._store.get_command(command_id)  # after registering: no gap
            while command.state not in COMMAND_MACHINE.final:
                left = FALLBACK_S if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"command {command_id} is still {command.state.value} after {timeout}s"
                    )
                record = finished.result(min(FALLBACK_S, left))
                if record is not None:
                    return record
                command = self._store.get_command(command_id)
            return command

    def events(
        self, session_id: str, after_seq: int, timeout: float | None
    ) -> Iterator[EventRecord]:
        """Yield events after ``after_seq`` as they commit; ends after ``closed`` or when no
        event arrived for ``timeout`` seconds."""
        committed = threading.Event()
        # Only the wake-up is used: the events are read from the log with their ids (the
        # mailbox is emptied unread each round, so it holds at most one round's commits).
        watch = self._store.watch.session(session_id, committed.set, finished=False)
        try:
            last = after_seq
            idle_since = time.monotonic()
            while not self._closed.is_set():
                committed.clear()  # before the read: a commit after it sets it again
                watch.discard()
                batch = self._store.events(session_id, last, 500)
                for event in batch:
                    last = event.seq
                    yield event
                    if event.kind == EventKind.CLOSED:
                        return
                if batch:
                    idle_since = time.monotonic()
                    continue
                deadline = None if timeout is None else idle_since + timeout
                left = FALLBACK_S if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return
                committed.wait(min(FALLBACK_S, left))
        finally:
            watch.close()
