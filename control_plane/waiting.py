"""Blocking waits on store commits: a command reaching a final state, new events of a session.

Woken by the store's after-commit notifications (no polling loop on the hot path); each
wait re-reads the store, so a missed wake-up only costs the fallback interval.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from state_machines import COMMAND_MACHINE
from state_machines.event_kinds import EventKind
from store import CommandRecord, EventRecord, Store

FALLBACK_S = 0.5


class Waiters:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._cond = threading.Condition()
        self._generation = 0
        self._unsubscribe = [
            store.subscribe(self._wake),
            store.subscribe_commands(self._wake),
        ]

    def close(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._wake(set())

    def _wake(self, _: set[str]) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def _wait_change(self, seen: int, deadline: float | None) -> int:
        with self._cond:
            if self._generation == seen:
                remaining = FALLBACK_S if deadline is None else deadline - time.monotonic()
                self._cond.wait(max(0.0, min(FALLBACK_S, remaining)))
            return self._generation

    def command(self, command_id: str, timeout: float | None) -> CommandRecord:
        deadline = None if timeout is None else time.monotonic() + timeout
        seen = self._generation
        while True:
            command = self._store.get_command(command_id)
            if command.state in COMMAND_MACHINE.final:
                return command
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"command {command_id} is still {command.state.value} after {timeout}s"
                )
            seen = self._wait_change(seen, deadline)

    def events(
        self, session_id: str, after_seq: int, timeout: float | None
    ) -> Iterator[EventRecord]:
        """Yield events after ``after_seq`` as they commit; ends after ``closed`` or when no
        event arrived for ``timeout`` seconds."""
        last = after_seq
        seen = self._generation
        idle_since = time.monotonic()
        while True:
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
            if deadline is not None and time.monotonic() >= deadline:
                return
            seen = self._wait_change(seen, deadline)
