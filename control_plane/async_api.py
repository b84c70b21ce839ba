"""``AsyncControlPlane``: the public API for asyncio hosts.

Every method runs the blocking ``ControlPlane`` call on a worker thread
(``asyncio.to_thread``), so the caller's event loop never blocks on a store commit, a wait for
an outcome, or an actor. ``follow`` tails through the aiosqlite read path, woken by the
commits of its session (``Store.watch``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

from control_plane.api import ControlPlane
from control_plane.outcome import Outcome
from state_machines import SessionState
from store import AsyncReader, CommandRecord, EventRecord, SessionRecord, SpawnResult


class AsyncControlPlane:
    def __init__(self, sync: ControlPlane) -> None:
        self.sync = sync
        self._reader = AsyncReader(sync.store_location)

    @classmethod
    async def open(cls, path: str | os.PathLike[str], **kwargs: Any) -> AsyncControlPlane:
        return cls(await asyncio.to_thread(ControlPlane.open, path, **kwargs))

    async def close(self) -> None:
        await self._reader.aclose()
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncControlPlane:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def spawn(self, *args: Any, **kwargs: Any) -> SpawnResult:
        return await asyncio.to_thread(self.sync.spawn, *args, **kwargs)

    async def prompt(self, session_id: str, prompt: Any, **kwargs: Any) -> CommandRecord:
        # Straight to the writer, no worker thread: the future resolves after the commit.
        return await asyncio.wrap_future(self.sync.submit_prompt(session_id, prompt, **kwargs))

    async def cancel(self, session_id: str, include_queued: bool = False) -> SessionState:
        return await asyncio.to_thread(self.sync.cancel, session_id, include_queued=include_queued)

    async def close_session(self, session_id: str, reason: str = "closed") -> SessionRecord:
        return await asyncio.to_thread(self.sync.close_session, session_id, reason)

    async def get(self, session_id: str) -> SessionRecord:
        return await asyncio.to_thread(self.sync.get, session_id)

    async def wait(self, command_id: str, timeout: float | None = None) -> Outcome:
        return await asyncio.to_thread(self.sync.wait, command_id, timeout)

    async def result(self, command_id: str) -> Outcome | None:
        return await asyncio.to_thread(self.sync.result, command_id)

    async def list_sessions(self, **kwargs: Any) -> list[SessionRecord]:
        return await self._reader.list_sessions(**kwargs)

    async def events(self, session_id: str, after_seq: int = 0) -> list[EventRecord]:
        await asyncio.to_thread(self.sync.get, session_id)  # SessionNotFound for unknown ids
        return await self._reader.events_after(session_id, after_seq)

    async def follow(self, session_id: str, after_seq: int = 0) -> AsyncIterator[EventRecord]:
        """Events as they commit, in order, until the session's ``closed`` event."""
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def on_commit() -> None:  # writer thread: hop to our loop
            loop.call_soon_threadsafe(wake.set)

        # Only the session's own commits wake it; the events are read with their global
        # ids (``EventRecord``), so the mailbox is emptied unread before each read.
        watch = self.sync.watch_session(session_id, on_commit, finished=False)
        try:
            async for event in self._reader.tail(
                session_id, after_seq, wake=wake, before_read=watch.discard
            ):
                yield event
        finally:
            watch.close()
