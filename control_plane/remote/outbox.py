"""What a connection still has to send its client, bounded: a client that does not read is
cut off (with the reason) once its backlog passes ``max_bytes``, instead of holding memory or
slowing the session and the other clients. Nothing here ever waits for the client: a put
never blocks, so the session's feed and other connections go on at full speed.

"Does not read" means: the backlog is over the bound while the sender has been stuck in one
send for ``stall_s`` (the client's TCP window is shut). One commit's burst may pass the
bound for a client that reads (the sender has not run yet): that is not cut, but a backlog
over ``HARD_FACTOR`` times the bound always is.

Messages are serialised when they are put (so the bound is in bytes, exactly), on the
server's loop."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

from protocol import json_codec
from state_machines import ControlPlaneError

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
STALL_S = 1.0
HARD_FACTOR = 4


class OutboxOverflow(ControlPlaneError):
    """The client stopped reading: its backlog passed the bound."""


class Outbox:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, stall_s: float = STALL_S) -> None:
        self.max_bytes = max_bytes
        self.stall_s = stall_s
        self._sending_since: float | None = None
        self._frames: deque[bytes] = deque()
        self._bytes = 0
        self._ready = asyncio.Event()
        self.closed_reason: str | None = None
        self.overflowed = False

    @property
    def backlog_bytes(self) -> int:
        return self._bytes

    def put(self, message: dict[str, Any]) -> None:
        self.put_frame(json_codec.dumps(message))

    def put_frame(self, frame: bytes) -> None:
        if self.closed_reason is not None:
            return
        self._frames.append(frame)
        self._bytes += len(frame)
        self._ready.set()
        if self._bytes > self.max_bytes and self._stuck():
            self.overflowed = True
            self.close(
                f"send buffer full ({self._bytes} bytes unread, limit {self.max_bytes}): "
                "reconnect and load the session from your last position"
            )

    def _stuck(self) -> bool:
        if self._bytes > HARD_FACTOR * self.max_bytes:
            return True
        since = self._sending_since
        return since is not None and time.monotonic() - since > self.stall_s

    def sending(self) -> None:
        """The sender starts writing what it took (call ``sent`` once the write returned)."""
        self._sending_since = time.monotonic()

    def sent(self) -> None:
        self._sending_since = None

    def close(self, reason: str) -> None:
        if self.closed_reason is None:
            self.closed_reason = reason
            self._frames.clear()
            self._bytes = 0
        self._ready.set()

    async def take(self) -> list[bytes]:
        """Everything queued, oldest first, once there is something; raises
        ``OutboxOverflow`` (or returns [] when closed normally) once closed."""
        while not self._frames:
            if self.closed_reason is not None:
                if self.overflowed:
                    raise OutboxOverflow(self.closed_reason)
                return []
            self._ready.clear()
            await self._ready.wait()
        frames = list(self._frames)
        self._frames.clear()
        self._bytes = 0
        return frames
