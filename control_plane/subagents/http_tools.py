"""The subagent tools over MCP's Streamable HTTP transport, served by the control plane's own
process on a loopback port: no process per session for the tools.

Each session's agent is offered ``http://127.0.0.1:PORT/sessions/<session id>/mcp`` (an
``http`` entry in ``session/new``'s ``mcpServers``, for agents that advertise
``mcpCapabilities.http``). A request is served only when the process at the client end of
its TCP connection is that session's agent or below it (``peers.py``); anything else gets
403 and a log line naming the session and the client port. No header carries a secret: what
an agent is given, Claude Code's SDK puts on a command line.

Start-up cost: the MCP SDK's server and uvicorn take ~1 s of CPU to import, more than the
rest of the control plane. The port is bound when the endpoint is made (a socket call); the
imports run on a thread of their own when the first connection arrives (it waits in the
listen backlog meanwhile, not refused), or earlier when a front end knows an agent will
connect (``warm()``: serve, once its backend agent's ``initialize`` says it speaks HTTP
MCP, so the imports overlap the session's start). A process whose agents never call a tool
never imports them: most of the example agent's sessions in the tests, for one. (A
host that imports the ``mcp`` package itself, on another thread, should do so before it
opens the control plane: two threads inside one package's circular imports can leave one
of them a half-made module. This thread retries; it cannot retry for the host's.)

Stateless MCP (``stateless_http``, JSON responses): each POST is a whole exchange, no MCP
session is kept between calls, and the caller is checked on every request, not once per
connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator, MutableMapping
from typing import TYPE_CHECKING, Any

from control_plane.subagents.peers import AgentTrees

if TYPE_CHECKING:
    from concurrent.futures import Future

    from control_plane.subagents.server import SubagentBridge

# Runs a coroutine on the protocol loop from any thread (``ProtocolLoop.submit``).
Submit = Callable[[Coroutine[Any, Any, None]], "Future[None]"]

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

SESSION_PATH = re.compile(r"/sessions/([A-Za-z0-9_.:-]{1,200})/mcp/?")
SESSION_KEY = "acpctl.session"  # where the gate leaves the checked session in the ASGI scope
START_TIMEOUT_S = 30.0


class HttpTools:
    """The endpoint: its port is bound on construction; ``warm()`` starts serving."""

    def __init__(self, bridge: SubagentBridge, trees: AgentTrees, submit: Submit) -> None:
        self._bridge = bridge
        self._trees = trees
        self._submit = submit
        # IPPROTO_TCP named, and TCP_NODELAY on the listener (accepted sockets inherit it):
        # asyncio turns Nagle off only on sockets whose proto is IPPROTO_TCP, and a plain
        # socket.socket() has proto 0. With Nagle on, a response's second write waits for
        # the client's delayed ACK: 40 ms on every request of a kept-alive connection
        # after the first (measured: 44 ms per tools/list, 1.2-1.9 ms without).
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)  # connections wait here until the server is up
        self._sock.setblocking(False)
        self.port: int = self._sock.getsockname()[1]
        self._warm_lock = threading.Lock()
        self._warming: threading.Thread | None = None
        self._serving: Future[None] | None = None
        self._server: Any = None
        self._stopped = False
        # Last: the loop may run it before this constructor returns.
        submit(self._warm_on_first_connection()).add_done_callback(self._served)

    def url_for(self, session_id: str) -> str:
        return f"http://127.0.0.1:{self.port}/sessions/{session_id}/mcp"

    def entry_for(self, session_id: str) -> dict[str, Any]:
        """The ``mcpServers`` entry for one session's agent (ACP ``McpServerHttp``)."""
        return {
            "type": "http",
            "name": "acp-control-plane",
            "url": self.url_for(session_id),
            "headers": [],
        }

    # -- lifecycle ---------------------------------------------------------------------

    async def _warm_on_first_connection(self) -> None:
        loop = asyncio.get_running_loop()

        def readable() -> None:
            loop.remove_reader(self._sock.fileno())
            self.warm()

        if not self._stopped:
            loop.add_reader(self._sock.fileno(), readable)

    def warm(self) -> None:
        """Start serving, once: the imports on a thread of their own, then the server on
        the protocol loop. Returns at once."""
        with self._warm_lock:
            if self._warming is not None or self._stopped:
                return
            self._warming = threading.Thread(target=self._start, name="cp-mcp-http", daemon=True)
            self._warming.start()

    def _start(self) -> None:
        try:
            _import_server_modules()
            import uvicorn
            from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
            from mcp.server.transport_security import TransportSecuritySettings

            from control_plane.subagents.tools import build_server

            manager = StreamableHTTPSessionManager(
                app=build_server(self._call),
                stateless=True,
                json_response=True,
                security_settings=TransportSecuritySettings(
                    enable_dns_rebinding_protection=True,
                    allowed_hosts=[f"127.0.0.1:{self.port}", f"localhost:{self.port}"],
                    allowed_origins=[
                        f"http://127.0.0.1:{self.port}",
                        f"http://localhost:{self.port}",
                    ],
                ),
            )

            class _Server(uvicorn.Server):
                # The control plane's signals are its own: uvicorn re-raises one once it
                # has stopped, which would end the process before the control plane closes.
                @contextlib.contextmanager
                def capture_signals(self) -> Generator[None, None, None]:
                    yield

            config = uvicorn.Config(
                _Gate(manager, self._bridge, self._trees),
                interface="asgi3",
                lifespan="off",
                log_config=None,
                access_log=False,
                timeout_graceful_shutdown=1,
            )
            # What uvicorn would import on the loop when it starts (its protocol classes),
            # imported here, where a clash with another thread's import is retried.
            _retrying_imports(config.load)
            server = _Server(config)
            with self._warm_lock:
                if self._stopped:
                    return
                self._server = server
                self._serving = self._submit(_serve(server, manager, self._sock))
                self._serving.add_done_callback(self._served)
        except Exception:
            log.exception("the subagent tools' HTTP endpoint did not start")
            self._refuse_from_now()

    def _served(self, serving: Future[None]) -> None:
        if serving.cancelled() or serving.exception() is None:
            return
        log.error("the subagent tools' HTTP endpoint failed", exc_info=serving.exception())
        self._refuse_from_now()

    def _refuse_from_now(self) -> None:
        """The tools cannot be served: close the port, so agents that connect get a refusal
        at once rather than waiting in the backlog for a server that will not come."""
        with self._warm_lock:
            self._stopped = True
        with contextlib.suppress(RuntimeError):  # the loop is gone: so is everything
            self._submit(self._close_port())

    async def _close_port(self) -> None:
        """On the loop (the port's fd may be in its selector)."""
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
        self._sock.close()

    async def stop(self) -> None:
        """On the protocol loop: stop serving and close the port."""
        with self._warm_lock:
            self._stopped = True
            server, serving = self._server, self._serving
        if server is not None:
            server.should_exit = True
        if serving is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.wrap_future(serving), 5)
        await self._close_port()

    async def _call(self, op: str, args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        session_id = ctx.request.scope[SESSION_KEY]  # put there by the gate, after its check
        return await self._bridge.serve(session_id, op, args, "http")


def _import_server_modules() -> None:
    """Import the MCP SDK's server side and uvicorn on this thread."""
    import importlib

    def load() -> None:
        for name in ("mcp.server.lowlevel", "mcp.server.streamable_http_manager", "uvicorn"):
            importlib.import_module(name)

    _retrying_imports(load)


def _retrying_imports(load: Callable[[], None], patience_s: float = 30.0) -> None:
    """Run ``load`` (which imports), again while it meets a half-made module. Another thread
    importing the same package at the same time (a host, or a test, using the MCP client)
    can meet this one in the middle of a circular import, and Python then hands one of
    them a half-made module (ImportError) rather than deadlock: the other thread's import
    finishes, and the next try here finds the module whole."""
    import time

    deadline = time.monotonic() + patience_s
    while True:
        try:
            load()
            return
        except ImportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


async def _serve(server: Any, manager: Any, sock: socket.socket) -> None:
    async with manager.run():
        await server.serve(sockets=[sock])


class _Gate:
    """The ASGI app in front of the MCP SDK's: the session from the path, and the caller
    checked against that session's agent tree."""

    def __init__(self, manager: Any, bridge: SubagentBridge, trees: AgentTrees) -> None:
        self._manager = manager
        self._bridge = bridge
        self._trees = trees

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        match = SESSION_PATH.fullmatch(scope["path"])
        if match is None:
            await _plain(send, 404, "not found: the subagent tools are at /sessions/<id>/mcp")
            return
        session_id = match.group(1)
        client, server = scope.get("client"), scope.get("server")
        if not client or not server or not self._trees.holds_tcp(session_id, client[1], server[1]):
            caller = f"127.0.0.1:{client[1] if client else '?'}"
            refused = self._bridge.refuse(session_id, caller, "http")
            await _plain(send, 403, str(refused))
            return
        await self._manager.handle_request({**scope, SESSION_KEY: session_id}, receive, send)


async def _plain(send: Send, status: int, text: str) -> None:
    """An HTTP error with a JSON-RPC error body, which MCP clients show as the reason."""
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": text}}
    body = json.dumps(error).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
