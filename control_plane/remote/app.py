"""The HTTP surface of ``serve --listen`` (Starlette): ``/acp`` in both profiles of ACP's
remote transport draft (the WebSocket side is ``ws.py``), ``/healthz``, ``/readyz``,
``/metrics``, and the console at ``/`` with its JSON API (``console_api.py``).

Streamable HTTP on ``/acp``: ``POST`` carries one client message (``initialize`` answered 200
with its result and an ``Acp-Connection-Id``; everything else 202, answered on a stream);
``GET`` with ``Accept: text/event-stream`` opens the connection's stream, or a session's
with ``Acp-Session-Id``; ``DELETE`` ends the connection (never its sessions). WebSocket on
``/acp``: one JSON-RPC message per text frame, both ways.

Refusals: 401 without a valid token (nothing is read further), 403 for a connection or
session of another token; a request the token may not send is answered with a JSON-RPC
error (-32003) on its stream, as any answer; 400 for a malformed message (a JSON-RPC error
body), 404 for an unknown connection, 406/415 for wrong ``Accept``/``Content-Type``, 409 for
a stream already being read, 413 for an oversize body, 503 for a new connection while
draining or past ``--max-connections``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from acp.http.protocol import CONNECTION_ID_HEADER, SESSION_ID_HEADER
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from control_plane.remote import console_api, console_permissions, console_workspace
from control_plane.remote.access import may_see
from control_plane.remote.auth import error_response, token_of, unauthorized
from control_plane.remote.connection import RemoteConnection
from control_plane.remote.console_files import console_files
from control_plane.remote.hub import Hub
from control_plane.remote.outbox import Outbox, OutboxOverflow
from control_plane.remote.telemetry import (
    CONNECTIONS,
    FORBIDDEN,
    AccessLog,
    App,
    Receive,
    Scope,
    Send,
)
from control_plane.remote.ws import serve_websocket
from protocol.face.input_guard import parse_frame
from state_machines import SessionNotFound
from store.tokens import TokenRecord

log = logging.getLogger("acpctl.remote")

SSE_KEEPALIVE_S = 15.0


def _note(scope_holder: Request, token: TokenRecord, conn_id: str | None) -> None:
    """For the access log: who (the token's name) and which connection."""
    scope_holder.scope.setdefault("state", {})["token_name"] = token.name
    if conn_id is not None:
        scope_holder.scope["state"]["connection_id"] = conn_id


# -- Streamable HTTP -----------------------------------------------------------------------


async def acp_http(request: Request) -> Response:
    hub: Hub = request.app.state.hub
    if hub.draining and request.headers.get(CONNECTION_ID_HEADER) not in hub.connections:
        # New connections only: attached clients still see their turns end, and answer.
        return error_response(503, "the server is shutting down")
    found = token_of(hub, request.headers, request.cookies)
    if found is None:
        return unauthorized()
    token, secret = found
    _note(request, token, request.headers.get(CONNECTION_ID_HEADER))
    if request.method == "POST":
        return await _post(hub, request, token, secret)
    accept = request.headers.get("accept", "")
    if request.method == "GET" and "text/event-stream" not in accept and "*/*" not in accept:
        return error_response(406, "Accept must include text/event-stream")
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
        return error_response(400, f"the {CONNECTION_ID_HEADER} header is missing")
    conn = hub.connections.get(conn_id)
    if conn is None:
        return error_response(
            404, "unknown connection id (ended, or never opened): initialize again"
        )
    if conn.token.id != token.id:
        return error_response(403, "the connection belongs to another token")
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
        return error_response(415, "Content-Type must be application/json")
    body = await _body(request, hub.limits.max_frame_bytes)
    if body is None:
        return error_response(413, f"a message may be at most {hub.limits.max_frame_bytes} bytes")
    message, problem = parse_frame(body, hub.limits.max_frame_bytes)
    if message is None:
        return JSONResponse(problem, status_code=400)
    if message.get("method") == "initialize" and "id" in message:
        if hub.full:
            return error_response(503, "too many connections")
        conn = hub.open(token, secret, multiplex=False)
        try:
            answer = await conn.request(message)
        except TimeoutError:
            await hub.close(conn, "initialize timed out")
            return error_response(504, "initialize timed out")
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
            return error_response(404, f"no session {session_id!r}")
        if not may_see(conn.token.id, conn.token.sessions, session.metadata):
            return error_response(403, "the token may only use the sessions it created")
        box = conn.session_box(session_id)
    else:
        box = conn.main
    if session_id in conn.streaming:
        return error_response(409, "that stream is being read already")
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
    if token_of(hub, request.headers, request.cookies) is None:
        return unauthorized()
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


def build_app(hub: Hub) -> App:
    """The ASGI application: WebSockets on ``/acp`` straight to their handler (a frame's
    send then crosses no middleware: 100 updates are 100 sends), the rest through Starlette
    and the access log."""
    app = Starlette(
        routes=[
            Route("/acp", acp_http, methods=["GET", "POST", "DELETE"]),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
            *console_api.ROUTES,
            *console_workspace.ROUTES,
            *console_permissions.ROUTES,
            Mount("/", console_files()),
        ],
        middleware=[Middleware(AccessLog)],
    )
    app.state.hub = hub

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and scope.get("path") == "/acp":
            await serve_websocket(hub, scope, receive, send)
        else:
            await app(scope, receive, send)

    return application
