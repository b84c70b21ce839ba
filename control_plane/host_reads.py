"""The host API's reads, deliveries and export (``ControlPlane`` inherits them): each is one
call into the store, the waiters or the delivery service that ``ControlPlane.open`` built."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from actors.delivery.service import DeliveryService
from control_plane.outcome import Outcome
from control_plane.waiting import Waiters
from state_machines import COMMAND_MACHINE, SessionState
from store import BindingRecord, CommandRecord, EventRecord, SessionRecord, Store
from store.records import BindingSpec, SinkKind


class HostReads:
    _store: Store
    _waiters: Waiters
    _delivery: DeliveryService

    # -- reading -------------------------------------------------------------------------

    def get(self, session_id: str) -> SessionRecord:
        return self._store.get_session(session_id)

    def command(self, command_id: str) -> CommandRecord:
        return self._store.get_command(command_id)

    def commands(self, session_id: str) -> list[CommandRecord]:
        return self._store.commands_of(session_id)

    def wait(self, command_id: str, timeout: float | None = None) -> Outcome:
        """Block until the command is final (``TimeoutError`` after ``timeout`` seconds)."""
        return Outcome.of(self._waiters.command(command_id, timeout))

    def result(self, command_id: str) -> Outcome | None:
        """The command's outcome, or None while it is queued or running."""
        command = self._store.get_command(command_id)
        return Outcome.of(command) if command.state in COMMAND_MACHINE.final else None

    def list_sessions(
        self, state: SessionState | None = None, limit: int = 100, after_id: str | None = None
    ) -> list[SessionRecord]:
        return self._store.list_sessions(state=state, limit=limit, after_id=after_id)

    def events(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        return self._store.events(session_id, after_seq, limit)

    def follow(
        self, session_id: str, after_seq: int = 0, idle_timeout: float | None = None
    ) -> Iterator[EventRecord]:
        """Events as they are committed, in order; ends after the session's ``closed`` event
        (or after ``idle_timeout`` seconds without a new event)."""
        self._store.get_session(session_id)
        return self._waiters.events(session_id, after_seq, idle_timeout)

    # -- delivery ------------------------------------------------------------------------

    def bind_jsonl(self, session_id: str, path: str | os.PathLike[str]) -> BindingRecord:
        spec = BindingSpec(SinkKind.JSONL, os.path.abspath(os.fspath(path)))
        binding = self._store.bind(session_id, spec)
        self._delivery.start()
        return binding

    def register_callback(self, name: str, fn: Callable[[EventRecord], None]) -> None:
        self._delivery.register_callback(name, fn)

    def wait_delivered(self, timeout: float = 10.0) -> bool:
        return self._delivery.wait_idle(timeout)

    # -- export --------------------------------------------------------------------------

    def export_jsonl(self, session_id: str, path: str | os.PathLike[str]) -> Path:
        """Write the session as a JSONL transcript v3 file (atomically); returns the path."""
        # Imported here: the transcript mapping is ~17 ms of every start (serve's, batch's)
        # that most processes never export from.
        from control_plane.export import export_session

        return export_session(self._store, session_id, path)
