"""What ``acpctl serve`` follows of each session its client opened, besides the turns it
prompts: the agent getting ready (``session/new`` answers with what the agent offers), and
the updates that belong to no prompt (``available_commands_update`` right after
``session/new``, ``current_mode_update``, config and session info updates), forwarded live.

Threads: the store wakes ``_on_commit`` on its writer thread (the session's mailbox stopped
being empty); everything else, the take from the mailbox too, runs on serve's own loop.
Updates of a session whose ``session/new`` has not been answered yet are held and sent after
the answer (a client cannot place updates of a session it does not know).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from control_plane.api import ControlPlane
from protocol.face.replay import update_of
from state_machines.event_kinds import EventKind
from store import CommittedEvent, EventRecord, SessionWatch

# The outcome of an agent start: ready (with what it offers) or refused.
SETUP_KINDS = (EventKind.AGENT_STARTED, EventKind.AGENT_START_FAILED)

Send = Callable[[str, list[dict[str, Any]]], Coroutine[Any, Any, None]]
SetupEvent = EventRecord | CommittedEvent


def _wanted(event: CommittedEvent) -> bool:
    """Agent starts, and the updates of no prompt (a prompt's own are the turn's stream)."""
    return event.kind in SETUP_KINDS or (
        event.command_id is None and event.kind == EventKind.SESSION_UPDATE
    )


class SessionWatches:
    def __init__(self, cp: ControlPlane, loop: asyncio.AbstractEventLoop, send: Send) -> None:
        self._cp = cp
        self._loop = loop
        self._send = send
        self._watches: dict[str, SessionWatch] = {}
        self._reading: set[str] = set()  # sessions whose take is reading the log
        self._held: dict[str, list[dict[str, Any]]] = {}
        self._waiting: dict[str, list[asyncio.Future[SetupEvent]]] = {}
        self._sending: set[asyncio.Task[None]] = set()

    def attach(self, session_id: str, hold: bool = False) -> None:
        """Follow the session (once); with ``hold``, keep its updates until ``release``."""
        if hold:
            self._held.setdefault(session_id, [])
        if session_id not in self._watches:
            self._watches[session_id] = self._cp.watch_session(
                session_id, lambda: self._on_commit(session_id), keep=_wanted, finished=False
            )

    def release(self, session_id: str) -> None:
        """Send what was held (call once the session's ``session/new`` answer is queued)."""
        held = self._held.pop(session_id, None)
        if held:
            self._forward(session_id, held)

    def close(self) -> None:
        for watch in self._watches.values():
            watch.close()
        self._watches.clear()

    async def setup(self, session_id: str, timeout: float, after_seq: int = 0) -> SetupEvent:
        """The session's first ``agent_started`` / ``agent_start_failed`` after ``after_seq``,
        waiting for it up to ``timeout`` seconds (``TimeoutError``)."""
        waiter: asyncio.Future[SetupEvent] = self._loop.create_future()
        self._waiting.setdefault(session_id, []).append(waiter)
        try:
            found = await asyncio.to_thread(self._stored_setup, session_id, after_seq)
            if found is not None:
                return found
            async with asyncio.timeout(timeout):
                return await waiter
        finally:
            waiters = self._waiting.get(session_id, [])
            if waiter in waiters:
                waiters.remove(waiter)

    def latest_setup(self, session_id: str) -> EventRecord | None:
        """The session's latest agent start outcome in the store (any thread)."""
        return self._cp.latest_event(session_id, SETUP_KINDS)

    def _stored_setup(self, session_id: str, after_seq: int) -> EventRecord | None:
        found = self._cp.events_of_kinds(session_id, SETUP_KINDS, after_seq)
        return found[0] if found else None

    # -- from the writer thread --------------------------------------------------------------

    def _on_commit(self, session_id: str) -> None:
        self._loop.call_soon_threadsafe(self._take, session_id)

    # -- on serve's loop ---------------------------------------------------------------------

    def _take(self, session_id: str) -> None:
        watch = self._watches.get(session_id)
        if watch is None or session_id in self._reading:
            return  # closed meanwhile, or a take reading the log takes again when done
        if watch.reads_log:  # the store read goes to a worker thread; later ones wait
            self._reading.add(session_id)
            self._forward_task(self._read_then_take(session_id, watch))
            return
        self._pass_on(session_id, watch.take().events)

    async def _read_then_take(self, session_id: str, watch: SessionWatch) -> None:
        try:
            events = (await watch.take_async()).events
        finally:
            self._reading.discard(session_id)
        self._pass_on(session_id, events)
        self._take(session_id)

    def _pass_on(self, session_id: str, events: list[CommittedEvent]) -> None:
        updates: list[dict[str, Any]] = []
        for event in events:
            if event.kind in SETUP_KINDS:
                for waiter in self._waiting.pop(session_id, []):
                    if not waiter.done():
                        waiter.set_result(event)
            elif (update := update_of(event)) is not None:
                updates.append(update)
        if not updates:
            return
        if session_id in self._held:
            self._held[session_id].extend(updates)
        else:
            self._forward(session_id, updates)

    def _forward(self, session_id: str, updates: list[dict[str, Any]]) -> None:
        self._forward_task(self._send(session_id, updates))

    def _forward_task(self, work: Coroutine[Any, Any, None]) -> None:
        task = self._loop.create_task(work)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)
