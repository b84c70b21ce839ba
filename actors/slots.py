"""Turn slots: at most ``limit`` sessions execute work at once, process-wide.

Waiting sessions are only ids in a FIFO (no thread, no actor), so a backlog of thousands of
sessions costs a deque entry each. A slot is held only while a session executes a command;
idle sessions hold none and never block new work.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable


class TurnSlots:
    def __init__(self, limit: int, grant: Callable[[str], None]) -> None:
        if limit < 1:
            raise ValueError("max_running_turns must be at least 1")
        self.limit = limit
        self._grant = grant  # called outside the lock with the session that got a slot
        self._lock = threading.Lock()
        self._holders: set[str] = set()
        self._waiting: OrderedDict[str, None] = OrderedDict()
        self.peak = 0

    def request(self, session_id: str) -> None:
        """Queue ``session_id`` for a slot (no-op if it holds or awaits one)."""
        with self._lock:
            if session_id in self._holders or session_id in self._waiting:
                return
            self._waiting[session_id] = None
        self._admit()

    def try_take(self, session_id: str) -> bool:
        """Take a slot at once if one is free and nobody is waiting for it (FIFO fairness);
        otherwise queue like ``request`` (the grant arrives later) and return False."""
        if self.take_if_free(session_id):
            return True
        self.request(session_id)
        return False

    def take_if_free(self, session_id: str) -> bool:
        """Take a slot only if ``try_take`` would at once; never queue for one (a prompt's
        write claiming for an idle session: ``actors/session/claim_offer.py``)."""
        with self._lock:
            if session_id in self._holders:
                return True
            if self._waiting or len(self._holders) >= self.limit:
                return False
            self._holders.add(session_id)
            self.peak = max(self.peak, len(self._holders))
            return True

    def release(self, session_id: str) -> None:
        with self._lock:
            self._holders.discard(session_id)
            self._waiting.pop(session_id, None)
        self._admit()

    def _admit(self) -> None:
        granted: list[str] = []
        with self._lock:
            while self._waiting and len(self._holders) < self.limit:
                session_id, _ = self._waiting.popitem(last=False)
                self._holders.add(session_id)
                granted.append(session_id)
            self.peak = max(self.peak, len(self._holders))
        for session_id in granted:
            self._grant(session_id)

    def holds(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._holders

    @property
    def running(self) -> int:
        with self._lock:
            return len(self._holders)

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)
