"""The network front end's metrics (Prometheus, the default registry like the rest) and its
access log: one structured line per HTTP request and per WebSocket session, with the
token's name, never its secret."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from prometheus_client import Counter, Gauge

CONNECTIONS = Gauge(
    "acpctl_remote_connections", "Open client connections of serve --listen.", ["transport"]
)
REFUSED = Counter(
    "acpctl_remote_refused_total",
    "Requests serve --listen refused, by HTTP status (401, 403, 413, ...).",
    ["status"],
)
CUT_OFF = Counter(
    "acpctl_remote_cut_off_total", "Connections cut off because their client did not read."
)
FORBIDDEN = Counter(
    "acpctl_remote_forbidden_total", "JSON-RPC requests a token was not allowed to send."
)

access_log = logging.getLogger("acpctl.access")
access_log.setLevel(logging.INFO)  # on, whatever the root logger's level

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class AccessLog:
    """ASGI middleware: one log line per request (HTTP) or per session (WebSocket), after
    it ended: method, path, status, duration, client, the token's name if one was valid."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status: list[int] = []

        async def sending(message: Message) -> None:
            kind = message["type"]
            if kind in ("http.response.start", "websocket.http.response.start"):
                status.append(int(message["status"]))
            elif kind == "websocket.accept":
                status.append(101)
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            code = status[0] if status else 0
            if code >= 400:
                REFUSED.labels(str(code)).inc()
            client = scope.get("client") or ("", 0)
            state = scope.get("state", {})
            access_log.info(
                "%s %s %s %.1fms client=%s:%s token=%s connection=%s",
                scope.get("method", "WS"),
                scope.get("path", ""),
                code,
                (time.monotonic() - started) * 1000,
                client[0],
                client[1],
                state.get("token_name", "-"),
                state.get("connection_id", "-"),
            )
