"""WebSockets on ``/acp``: one JSON-RPC message per text frame, both ways. Called straight
from the ASGI application (not through Starlette's routing and middleware): each of a turn's
updates is one send, and a send that crosses no middleware costs a third as much. Starlette's
``WebSocket`` still does the handshake, headers, cookies and receiving; frames go out on the
raw ASGI ``send``. The session is logged to the access log when it ends."""

from __future__ import annotations

import asyncio
import contextlib
import time

from acp.http.protocol import CONNECTION_ID_HEADER
from starlette.websockets import WebSocket, WebSocketDisconnect

from control_plane.remote.auth import chosen_subprotocol, error_response, token_of, unauthorized
from control_plane.remote.connection import RemoteConnection
from control_plane.remote.hub import Hub
from control_plane.remote.outbox import OutboxOverflow
from control_plane.remote.telemetry import (
    CONNECTIONS,
    FORBIDDEN,
    REFUSED,
    Receive,
    Scope,
    Send,
    access_log,
)
from control_plane.remote.ws_protocol import EXTENSION
from protocol.face.input_guard import parse_frame

WS_POLICY = 1008  # a close code: the client broke a rule (did not read; token revoked)


async def serve_websocket(hub: Hub, scope: Scope, receive: Receive, send: Send) -> None:
    started = time.monotonic()
    ws = WebSocket(scope, receive, send)
    status, token_name, conn_id = 101, "-", "-"
    try:
        if hub.draining:
            status = 503
            await ws.send_denial_response(error_response(503, "the server is shutting down"))
            return
        found = token_of(hub, ws.headers, ws.cookies)
        if found is None:
            status = 401
            await ws.send_denial_response(unauthorized())
            return
        token, secret = found
        token_name = token.name
        if hub.full:
            status = 503
            await ws.send_denial_response(error_response(503, "too many connections"))
            return
        conn = hub.open(token, secret, multiplex=True)
        conn_id = conn.id
        await ws.accept(
            subprotocol=chosen_subprotocol(ws.headers),
            headers=[(CONNECTION_ID_HEADER.lower().encode(), conn.id.encode())],
        )
        await _run(hub, ws, conn, send)
    finally:
        if status >= 400:
            REFUSED.labels(str(status)).inc()
        client = scope.get("client") or ("", 0)
        access_log.info(
            "WS /acp %s %.1fms client=%s:%s token=%s connection=%s",
            status,
            (time.monotonic() - started) * 1000,
            client[0],
            client[1],
            token_name,
            conn_id,
        )


async def _run(hub: Hub, ws: WebSocket, conn: RemoteConnection, send: Send) -> None:
    CONNECTIONS.labels("websocket").inc()
    reading = asyncio.create_task(_inbound(hub, ws, conn))
    batched = EXTENSION in (ws.scope.get("extensions") or {})
    writing = asyncio.create_task(_outbound(conn, send, batched))
    try:
        await asyncio.wait({reading, writing}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (reading, writing):
            task.cancel()
        for task in (reading, writing):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        reason = None
        for task in (writing, reading):
            if task.done() and not task.cancelled() and task.exception() is not None:
                reason = str(task.exception())
        CONNECTIONS.labels("websocket").dec()
        await hub.close(conn, reason or "the client disconnected")
        with contextlib.suppress(Exception):
            await ws.close(WS_POLICY if reason else 1000, (reason or "")[:120])


async def _inbound(hub: Hub, ws: WebSocket, conn: RemoteConnection) -> None:
    limit = hub.limits.max_frame_bytes
    while True:
        try:
            received = await ws.receive()
        except WebSocketDisconnect:
            return
        if received["type"] == "websocket.disconnect":
            return
        if hub.tokens(conn.secret) is None:
            raise PermissionError("the token was revoked")
        text, data = received.get("text"), received.get("bytes")
        raw = text.encode() if text is not None else data or b""
        message, problem = parse_frame(raw, limit)
        if message is None:
            conn.send_error(problem)
            continue
        denied = await conn.deliver(message)
        if denied is not None:
            FORBIDDEN.inc()
        if denied is not None and "id" in message:
            conn.send_error(denied.response)


async def _outbound(conn: RemoteConnection, send: Send, batched: bool) -> None:
    """What the connection has for its client, a burst at a time: one write of all its
    frames when the server has the extension (``ws_protocol.py``), else frame by frame."""
    while True:
        try:
            frames = await conn.main.take()
        except OutboxOverflow as exc:
            raise ConnectionAbortedError(str(exc)) from None
        if not frames:
            return
        conn.main.sending()
        if batched:
            await send({"type": EXTENSION, "frames": frames})
        else:
            for frame in frames:
                await send({"type": "websocket.send", "text": frame.decode()})
        conn.main.sent()
