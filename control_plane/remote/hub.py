"""What every connection of ``serve --listen`` shares: the control plane, the backend agent,
the permission router, the token check, and the registry of open connections."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from control_plane.api import ControlPlane
from control_plane.remote.connection import RemoteConnection
from control_plane.remote.frames import FrameCache
from control_plane.remote.permissions import PermissionRouter
from control_plane.tokens import TokenCheck
from store import AgentSpec
from store.tokens import TokenRecord

# An HTTP connection whose client reads none of its streams for this long is closed (a
# client that vanished sends no DELETE); its sessions live on.
HTTP_IDLE_S = 60.0


@dataclass
class Limits:
    max_frame_bytes: int = 8 * 1024 * 1024
    max_buffer_bytes: int = 16 * 1024 * 1024
    http_idle_s: float = HTTP_IDLE_S
    # Open client connections at most (each holds buffers and follows); beyond: 503. uvicorn's
    # own limit does not count WebSockets (they leave its HTTP protocol at the upgrade).
    max_connections: int = 1000


class Hub:
    def __init__(
        self,
        cp: ControlPlane,
        agent: AgentSpec,
        queue_mode: str,
        permissions: PermissionRouter,
        limits: Limits,
    ) -> None:
        self.cp = cp
        self.agent = agent
        self.queue_mode = queue_mode
        self.permissions = permissions
        self.limits = limits
        self.max_buffer_bytes = limits.max_buffer_bytes
        self.tokens = TokenCheck(cp.token_by_digest)
        self.frames = FrameCache()  # one serialisation of an update for all its followers
        self.connections: dict[str, RemoteConnection] = {}
        self._idle_since: dict[str, float] = {}
        self.draining = False
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def full(self) -> bool:
        return len(self.connections) >= self.limits.max_connections

    def open(self, token: TokenRecord, secret: str, multiplex: bool) -> RemoteConnection:
        conn = RemoteConnection(self, token, secret, multiplex)
        self.connections[conn.id] = conn
        if not multiplex:
            self._idle_since[conn.id] = time.monotonic()
        return conn

    async def close(self, conn: RemoteConnection, reason: str) -> None:
        self.connections.pop(conn.id, None)
        self._idle_since.pop(conn.id, None)
        await conn.close(reason)

    def close_soon(self, conn: RemoteConnection, reason: str) -> None:
        task = asyncio.get_running_loop().create_task(self.close(conn, reason))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close_all(self, reason: str) -> None:
        for conn in list(self.connections.values()):
            await self.close(conn, reason)

    # -- HTTP streams ----------------------------------------------------------------------

    def stream_opened(self, conn: RemoteConnection, key: str | None) -> None:
        conn.streaming.add(key)
        self._idle_since.pop(conn.id, None)

    def stream_ended(self, conn: RemoteConnection, key: str | None) -> None:
        conn.streaming.discard(key)
        if not conn.streaming and conn.id in self.connections:
            self._idle_since[conn.id] = time.monotonic()

    async def sweep_idle(self) -> None:
        """Close HTTP connections nobody reads (run every few seconds)."""
        while True:
            await asyncio.sleep(min(5.0, self.limits.http_idle_s / 2))
            now = time.monotonic()
            for conn_id, since in list(self._idle_since.items()):
                conn = self.connections.get(conn_id)
                if conn is not None and now - since > self.limits.http_idle_s:
                    with contextlib.suppress(Exception):
                        await self.close(conn, "no stream read for a while: closed")
