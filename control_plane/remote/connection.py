"""One network client connection: an ACP agent connection of the SDK bound to in-memory
message queues, the client's messages checked (its token's rights) before the SDK sees them,
and what goes back to the client put in bounded outboxes.

WebSocket: one outbox, everything on the socket. Streamable HTTP: the connection's stream,
plus one stream per session the client opened (``Acp-Session-Id``); a session's updates,
requests and the answers to its requests go on its stream when it is open, else on the
connection's.

Ordering: the session follows put updates straight into the outbox on this loop; the SDK's
answers arrive through its sender and ``_pump``. A prompt's answer is sent after the prompt
handler returned, which is after its updates were put, so it comes after them; a new
session's updates are held until its ``session/new`` answer passed ``_route``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from typing import Any, Protocol

from acp.agent.connection import AgentSideConnection

from control_plane.api import ControlPlane
from control_plane.remote.access import Denied, check_access
from control_plane.remote.agent import RemoteServeAgent
from control_plane.remote.frames import FrameCache, Frames
from control_plane.remote.outbox import Outbox
from control_plane.remote.roles import PermissionDesk
from control_plane.remote.sdk_transport import message_pair
from control_plane.remote.telemetry import CUT_OFF
from store import AgentSpec
from store.tokens import TokenAccess, TokenRecord

log = logging.getLogger("acpctl.remote")

INITIALIZE_TIMEOUT_S = 60.0


class ConnectionHost(Protocol):
    """What a connection needs of the server that holds it (``Hub``)."""

    @property
    def cp(self) -> ControlPlane: ...

    @property
    def agent(self) -> AgentSpec: ...

    @property
    def queue_mode(self) -> str: ...

    @property
    def max_buffer_bytes(self) -> int: ...

    @property
    def frames(self) -> FrameCache: ...

    @property
    def permissions(self) -> PermissionDesk: ...

    def close_soon(self, conn: RemoteConnection, reason: str) -> None: ...


class RemoteConnection:
    def __init__(
        self, hub: ConnectionHost, token: TokenRecord, secret: str, multiplex: bool
    ) -> None:
        self.hub = hub
        self.cp = hub.cp
        self.token = token
        self.secret = secret  # memory only: re-checked against the store (revocation)
        self.multiplex = multiplex
        self.id = secrets.token_hex(16)
        self.main = Outbox(hub.max_buffer_bytes)
        self.session_boxes: dict[str, Outbox] = {}
        self.streaming: set[str | None] = set()  # HTTP streams a client reads now
        self.closed_reason: str | None = None
        self._cutting = False  # a cut-off is on its way (close_soon)
        self._routes: dict[str, str] = {}  # request id -> session id (answers' stream)
        self._waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._holding: set[str] = set()
        self.allowed_sessions: set[str] = set()
        server_side, self._pump_side = message_pair()
        self.agent = RemoteServeAgent(hub.cp, hub.agent, self, hub.queue_mode)
        self._sdk = AgentSideConnection(
            self.agent,  # type: ignore[arg-type]  # duck-typed: missing methods -> -32601
            server_side,
            listening=True,
            use_unstable_protocol=True,
        )
        self._pump = asyncio.create_task(self._pump_outbound())

    @property
    def may_answer_permissions(self) -> bool:
        return self.token.access is TokenAccess.CONTROL and self.closed_reason is None

    @property
    def answerer(self) -> str:
        return self.token.name

    @property
    def frames(self) -> FrameCache:
        return self.hub.frames

    @property
    def permissions(self) -> PermissionDesk:
        return self.hub.permissions

    # -- to the client -----------------------------------------------------------------------

    def _box(self, session_id: str | None) -> Outbox:
        if self.multiplex or not isinstance(session_id, str):
            return self.main
        return self.session_boxes.get(session_id, self.main)

    def send_updates(self, session_id: str, frames: Frames) -> None:
        """A session's ``session/update`` frames (``frames.py``: shared by its followers)."""
        box = self._box(session_id)
        for _position, frame in frames:
            box.put_frame(frame)
        self._check_overflow(box)

    def send_request(self, session_id: str | None, message: dict[str, Any]) -> None:
        box = self._box(session_id)
        box.put(message)
        self._check_overflow(box)

    def send_notification(self, session_id: str, method: str, params: dict[str, Any]) -> None:
        self.send_request(session_id, {"jsonrpc": "2.0", "method": method, "params": params})

    def send_error(self, response: dict[str, Any]) -> None:
        self.main.put(response)
        self._check_overflow(self.main)

    def answer_on_stream(self, response: dict[str, Any], request: dict[str, Any]) -> None:
        """An answer of our own to ``request``, on the stream its SDK answer would take."""
        params = request.get("params")
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        self.send_request(session_id, response)

    def attached(self, session_id: str) -> None:
        """The client opened the session on this connection (new, load, resume, prompt)."""
        self.allowed_sessions.add(session_id)
        self.hub.permissions.attach(session_id, self)

    def hold_until_answered(self, session_id: str) -> None:
        self._holding.add(session_id)

    def _check_overflow(self, box: Outbox) -> None:
        # Once: the close runs as a task, and more puts may come before it does.
        if box.overflowed and self.closed_reason is None and not self._cutting:
            self._cutting = True
            log.warning("connection %s cut off: %s", self.id, box.closed_reason)
            CUT_OFF.inc()
            self.hub.close_soon(self, box.closed_reason or "send buffer full")

    # -- the SDK's messages ------------------------------------------------------------------

    async def _pump_outbound(self) -> None:
        while (message := await self._pump_side.receive()) is not None:
            self._route(message)

    def _route(self, message: dict[str, Any]) -> None:
        if "id" in message and "method" not in message:
            key = str(message["id"])
            waiter = self._waiters.pop(key, None)
            if waiter is not None:
                if not waiter.done():
                    waiter.set_result(message)
                return
            routed = self._routes.pop(key, None)
            result = message.get("result")
            established = result.get("sessionId") if isinstance(result, dict) else None
            box = self.main if established is not None else self._box(routed)
            box.put(message)
            self._check_overflow(box)
            if isinstance(established, str) and established in self._holding:
                self._holding.discard(established)
                self.agent.released(established)
            return
        params = message.get("params")
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        self.send_request(session_id, message)

    # -- from the client ---------------------------------------------------------------------

    async def deliver(self, message: dict[str, Any]) -> Denied | None:
        """Hand a client message to the SDK, unless its token may not send it."""
        if "method" not in message:
            if not await self.hub.permissions.answered(self, message):
                await self._pump_side.send(message)
            return None
        denied = await check_access(self, message)
        if denied is not None:
            return denied
        params = message.get("params")
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if "id" in message and isinstance(session_id, str):
            self._routes[str(message["id"])] = session_id
        await self._pump_side.send(message)
        return None

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send a request and wait for its answer here (``initialize`` over HTTP, whose
        answer is the POST's body)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters[str(message.get("id"))] = waiter
        await self._pump_side.send(message)
        return await asyncio.wait_for(waiter, INITIALIZE_TIMEOUT_S)

    def session_box(self, session_id: str) -> Outbox:
        box = self.session_boxes.get(session_id)
        if box is None:
            box = self.session_boxes[session_id] = Outbox(self.hub.max_buffer_bytes)
        return box

    async def close(self, reason: str) -> None:
        """Detach (the sessions live on: a durable server never ends them for a client)."""
        if self.closed_reason is not None:
            return
        self.closed_reason = reason
        self.hub.permissions.detach(self)
        self.agent.close()
        for box in (self.main, *self.session_boxes.values()):
            box.close(reason)
        self._pump.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._pump
        with contextlib.suppress(Exception):
            await self._pump_side.close()
        with contextlib.suppress(Exception):
            await self._sdk.close()
