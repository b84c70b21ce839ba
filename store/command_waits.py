"""Waiting for a command to become final, told by the commit that finishes it.

A waiter registers the command's id before it reads the command once; the writer thread
resolves its future with the finished ``CommandRecord`` the commit carries (the writer has
it in memory), so a blocked ``wait()`` costs no read per commit of any session (it used to
re-read its command after every commit anywhere: N waiters times M commits reads).

What this process's writer does not commit (another process on the same SQLite file, another
node on PostgreSQL) is not told here: the waiter's caller re-reads at a slow fallback interval.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from concurrent.futures import Future

from store.records import CommandRecord


class CommandWaits:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, list[Future[CommandRecord]]] = {}

    def expect(self, command_id: str) -> Future[CommandRecord]:
        """A future that the commit finishing ``command_id`` resolves (``forget`` it after)."""
        future: Future[CommandRecord] = Future()
        with self._lock:
            self._waiting.setdefault(command_id, []).append(future)
        return future

    def forget(self, command_id: str, future: Future[CommandRecord]) -> None:
        with self._lock:
            futures = self._waiting.get(command_id)
            if futures is not None and future in futures:
                futures.remove(future)
                if not futures:
                    del self._waiting[command_id]

    def publish(self, finished: Iterable[CommandRecord]) -> None:
        """On the writer thread, after the commit: resolve the waiters of what it finished."""
        if not self._waiting:  # unlocked peek: most commits have nobody waiting
            return
        resolved: list[tuple[list[Future[CommandRecord]], CommandRecord]] = []
        with self._lock:
            for record in finished:
                futures = self._waiting.pop(record.id, None)
                if futures:
                    resolved.append((futures, record))
        for futures, record in resolved:
            for future in futures:
                if not future.done():
                    future.set_result(record)
