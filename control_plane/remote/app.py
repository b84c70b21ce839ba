"""The HTTP surface of ``serve --listen`` (Starlette): ``/acp`` in both profiles of ACP's
remote transport draft, ``/healthz`` and ``/readyz``.

Streamable HTTP on ``/acp``: ``POST`` carries one client message (``initialize`` answered 200
with its result and an ``Acp-Connection-Id``; everything else 202, answered on a stream);
``GET`` with ``Accept: text/event-stream`` opens the connection's stream, or a session's
with ``Acp-Session-Id``; ``DELETE`` ends the connection (never its sessions). WebSocket on
``/acp``: one JSON-RPC message per text frame, both ways.

Refusals: 401 without a valid token (nothing is read further), 403 for a connection or
session of another token; a request the token may not send is answered with a JSON-RPC
error (-32003) on its stream, as any answer; 400 for a malformed message (a JSON-RPC error
body), 404 for an unknown connection,
406/415 for wrong ``Accept``/``Content-Type``, 409 for a stream already being read, 413 for
an oversize body, 503 while draining."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from acp.http.protocol import CONNECTION_ID_HEADER, SESSION_ID_HEADER
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from control_plane.remote.access import may_see
from control_plane.remote.auth import chosen_subprotocol, presented_secret
from control_plane.remote.connection import RemoteConnection
from control_plane.remote.hub import Hub
from control_plane.remote.outbox import Outbox, OutboxOverflow
from control_plane.remote.telemetry import CONNECTIONS, FORBIDDEN, AccessLog
from protocol.face.input_guard import parse_frame
from state_machines import SessionNotFound
from store.tokens import TokenRecord

log = logging.getLogger("acpctl.remote")

SSE_KEEPALIVE_S = 15.0
WS_POLICY = 1008  # a close code: the client broke a rule (did not read; token revoked)


def _error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def _unauthorized() -> JSONResponse:
    return _error(
        401, "a valid access token is required", **{"WWW-Authenticate": 'Bearer realm="acpctl"'}
    )


def _token(hub: Hub, headers: Any, cookies: Any) -> tuple[TokenRecord, str] | None:
    secret = presented_secret(headers, cookies)
    if secret is None:
        return None
    token = hub.tokens(secret)
    return None if token is None else (token, secret)


def _note(scope_holder: Request | WebSocket, token: TokenRecord, conn_id: str | None) -> None:
    """For the access log: who (the token's name) and which connection."""
    scope_holder.scope.setdefault("state", {})["token_name"] = token.name
    if conn_id is not None:
        scope_holder.scope["state"]["connection_id"] = conn_id


# -- Streamable HTTP -----------------------------------------------------------------------


async def acp_http(request: Request) -> Response:
    hub: Hub = request.app.state.hub
    if hub.draining and request.headers.get(CONNECTION_ID_HEADER) not in hub.connections:
        # New connections only: attached clients still see their turns end, and answer.
        return _error(503, "the server is shutting down")
    found = _token(hub, request.headers, request.cookies)
    if found is None:
        return _unauthorized()
    token, secret = found
    _note(request, token, request.headers.get(CONNECTION_ID_HEADER))
    if request.method == "POST":
        return await _post(hub, request, token, secret)
    accept = request.headers.get("accept", "")
    if request.method == "GET" and "text/event-stream" not in accept and "*/*" not in accept:
        return _error(406, "Accept must include text/event-stream")
    conn_or_error = _connection(hub, request, token)
    if isinstance(conn_or_error, Response):
        return conn_or_error
    conn = conn_or_error
    if request.method == "DELETE":
        await hub.close(conn, "the client ended the connection")
        return Response(status_code=202)
    return await _stream(hub, request, conn)


def _connection(hub: Hub, request: Request, token: TokenRecord) -> RemoteConnection | Response:
    conn_id = request.headers.get(CONNECTION_ID_HEADER)
    if not conn_id:
        return _error(400, f"the {CONNECTION_ID_HEADER} header is missing")
    conn = hub.connections.get(conn_id)
    if conn is None:
        return _error(404, "unknown connection id (ended, or never opened): initialize again")
    if conn.token.id != token.id:
        return _error(403, "the connection belongs to another token")
    return conn


async def _body(request: Request, limit: int) -> bytes | None:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks = bytearray()
    async for chunk in request.stream():
        chunks += chunk
        if len(chunks) > limit:
            return None
    return bytes(chunks)


async def _post(hub: Hub, request: Request, token: TokenRecord, secret: str) -> Response:
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("application/json"):
        return _error(415, "Content-Type must be application/json")
    body = await _body(request, hub.limits.max_frame_bytes)
    if body is None:
        return _error(413, f"a message may be at most {hub.limits.max_frame_bytes} bytes")
    message, problem = parse_frame(body, hub.limits.max_frame_bytes)
    if message is None:
        return JSONResponse(problem, status_code=400)
    if message.get("method") == "initialize" and "id" in message:
        conn = hub.open(token, secret, multiplex=False)
        try:
            answer = await conn.request(message)
        except TimeoutError:
            await hub.close(conn, "initialize timed out")
            return _error(504, "initialize timed out")
        _note(request, token, conn.id)
        return JSONResponse(answer, headers={CONNECTION_ID_HEADER: conn.id})
    conn_or_error = _connection(hub, request, token)
    if isinstance(conn_or_error, Response):
        return conn_or_error
    denied = await conn_or_error.deliver(message)
    if denied is not None:
        FORBIDDEN.inc()
    if denied is not None and "id" in message:
        # Answered like any request, on its stream: a 403 would end the whole transport
        # in the TypeScript SDK's client, for one request a watch-only token may not send.
        conn_or_error.answer_on_stream(denied.response, message)
    return Response(status_code=202)


async def _stream(hub: Hub, request: Request, conn: RemoteConnection) -> Response:
    session_id = request.headers.get(SESSION_ID_HEADER)
    if session_id is not None:
        try:
            session = await asyncio.to_thread(hub.cp.get, session_id)
        except SessionNotFound:
            return _error(404, f"no session {session_id!r}")
        if not may_see(conn.token.id, conn.token.sessions, session.metadata):
            return _error(403, "the token may only use the sessions it created")
        box = conn.session_box(session_id)
    else:
        box = conn.main
    if session_id in conn.streaming:
        return _error(409, "that stream is being read already")
    hub.stream_opened(conn, session_id)
    CONNECTIONS.labels("sse").inc()
    return StreamingResponse(
        _sse(hub, conn, box, session_id),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _sse(
    hub: Hub, conn: RemoteConnection, box: Outbox, key: str | None
) -> AsyncIterator[bytes]:
    try:
        while True:
            try:
                frames = await asyncio.wait_for(box.take(), SSE_KEEPALIVE_S)
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            except OutboxOverflow as exc:
                yield f": closed: {exc}\n\n".encode()
                return
            if not frames:
                return
            box.sending()
            yield b"".join(b"data: " + frame + b"\n\n" for frame in frames)
            box.sent()
    finally:
        CONNECTIONS.labels("sse").dec()
        hub.stream_ended(conn, key)


# -- WebSocket -----------------------------------------------------------------------------


async def acp_websocket(ws: WebSocket) -> None:
    hub: Hub = ws.app.state.hub
    if hub.draining:
        await ws.send_denial_response(_error(503, "the server is shutting down"))
        return
    found = _token(hub, ws.headers, ws.cookies)
    if found is None:
        await ws.send_denial_response(_unauthorized())
        return
    token, secret = found
    conn = hub.open(token, secret, multiplex=True)
    _note(ws, token, conn.id)
    CONNECTIONS.labels("websocket").inc()
    await ws.accept(
        subprotocol=chosen_subprotocol(ws.headers),
        headers=[(CONNECTION_ID_HEADER.lower().encode(), conn.id.encode())],
    )
    reading = asyncio.create_task(_ws_inbound(hub, ws, conn))
    writing = asyncio.create_task(_ws_outbound(ws, conn))
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


async def _ws_inbound(hub: Hub, ws: WebSocket, conn: RemoteConnection) -> None:
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


async def _ws_outbound(ws: WebSocket, conn: RemoteConnection) -> None:
    while True:
        try:
            frames = await conn.main.take()
        except OutboxOverflow as exc:
            raise ConnectionAbortedError(str(exc)) from None
        if not frames:
            return
        conn.main.sending()
        for frame in frames:
            await ws.send_text(frame.decode())
        conn.main.sent()


# -- operations ----------------------------------------------------------------------------


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


async def readyz(request: Request) -> Response:
    hub: Hub = request.app.state.hub
    if hub.draining:
        return PlainTextResponse("draining", status_code=503)
    fault = await asyncio.to_thread(hub.cp.store_fault, 0.0)
    if fault is not None:
        return PlainTextResponse(f"store refuses writes: {fault}", status_code=503)
    return PlainTextResponse("ready")


async def metrics(request: Request) -> Response:
    """Prometheus text format, for any valid token (a scraper's ``authorization``)."""
    hub: Hub = request.app.state.hub
    if _token(hub, request.headers, request.cookies) is None:
        return _unauthorized()
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


def build_app(hub: Hub) -> Starlette:
    app = Starlette(
        routes=[
            Route("/acp", acp_http, methods=["GET", "POST", "DELETE"]),
            WebSocketRoute("/acp", acp_websocket),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
        ],
        middleware=[Middleware(AccessLog)],
    )
    app.state.hub = hub
    return app
