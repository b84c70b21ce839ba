"""A prompt's feed: the session's committed events and finished commands, moved from the
store's writer thread to serve's loop in commit order."""

from __future__ import annotations

import asyncio

from store import SessionCommit, SessionWatch


class TurnFeed:
    """A session's committed events and finished commands on the serve loop, in commit
    order: the store's mailbox for the session (store/feed.py) wakes the loop once per burst,
    and ``next`` takes everything that arrived since the last call at once."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._wake: asyncio.Event = asyncio.Event()
        self.watch: SessionWatch | None = None  # set by whoever opens the watch

    def wake(self) -> None:  # store writer thread: the mailbox stopped being empty
        self._loop.call_soon_threadsafe(self._wake.set)

    async def next(self, timeout: float) -> SessionCommit | None:
        """What committed since the last call; None after ``timeout`` seconds without any."""
        assert self.watch is not None
        if not self._wake.is_set():
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                return None
        # Cleared before the take: a commit after it wakes the loop again.
        self._wake.clear()
        return await self.watch.take_async()
