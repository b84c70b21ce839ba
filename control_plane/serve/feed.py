"""A prompt's feed: the session's committed events and finished commands, moved from the
store's writer thread to serve's loop in commit order."""

from __future__ import annotations

import asyncio
import threading

from store import (
    SessionCommit,
)


class TurnFeed:
    """A session's committed events and finished commands, moved from the store's writer
    thread to the serve loop in commit order. ``next`` returns everything that arrived
    since the last call at once (one loop wake-up per burst, not per commit)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._shares: list[SessionCommit] = []
        self._wake: asyncio.Event = asyncio.Event()
        self._wake_pending = False

    def on_commit(self, share: SessionCommit) -> None:  # store writer thread
        with self._lock:
            self._shares.append(share)
            if self._wake_pending:
                return  # the loop has not taken the previous ones yet: it will take this too
            self._wake_pending = True
        self._loop.call_soon_threadsafe(self._wake.set)

    async def next(self, timeout: float) -> list[SessionCommit] | None:
        """The shares committed since the last call, oldest first; None after ``timeout``
        seconds without any."""
        if not self._wake.is_set():
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                return None
        with self._lock:
            shares, self._shares = self._shares, []
            self._wake_pending = False
            self._wake.clear()
        return shares
