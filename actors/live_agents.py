"""The cap on live agents: which idle sessions to passivate first when there are too many.

Each live agent process costs memory (a real coding agent: tens to hundreds of MB), and
``passivate_after_s`` alone let 200 recently used sessions hold 8.4 GB. Every actor posts
here, after each message it handled, when it became idle (or that it is busy with a turn);
the supervisor's sweep asks for the least recently used idle sessions beyond
``max_live_agents`` and passivates them early. A passivated session loses nothing: its next
command starts the agent again and restores its ACP session.

Posting is one dict assignment under the GIL (it is on every message of every actor); the
choice is a sort of the live sessions once per sweep.
"""

from __future__ import annotations

import math


class LiveAgents:
    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self._idle_since: dict[str, float] = {}  # math.inf while a turn runs

    def post(self, session_id: str, busy: bool, idle_since: float) -> None:
        """After each message an actor handled: busy with a turn, or idle since when."""
        self._idle_since[session_id] = math.inf if busy else idle_since

    def gone(self, session_id: str) -> None:
        self._idle_since.pop(session_id, None)

    def over_cap(self, live: list[str]) -> list[str]:
        """The idle sessions among ``live`` to passivate now, least recently used first, so
        that at most ``cap`` stay (busy ones are never chosen; they count toward the cap)."""
        if self.cap is None or len(live) <= self.cap:
            return []
        known = dict(self._idle_since)  # one C-level copy: atomic under the GIL
        # A session not posted yet has just been activated: not a candidate.
        idle = sorted((known[sid], sid) for sid in live if known.get(sid, math.inf) != math.inf)
        return [sid for _, sid in idle[: len(live) - self.cap]]
