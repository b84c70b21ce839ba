"""An MCP server over Streamable HTTP that is always ready, for the start-to-ready floor: the
direct agent offered it in ``session/new`` shows what an agent's own session start costs
with an HTTP MCP server to connect to, apart from anything the control plane does.

The same five tools as the control plane's (``control_plane/subagents/tools.py``), each
answering a fixed text; no bridge, no check of the caller. Runs on a thread of its own with
its own event loop, started (and imported) before any timed round.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any


class McpStandIn:
    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # see http_tools.py
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port: int = self._sock.getsockname()[1]
        self._ready = threading.Event()
        self._server: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="mcp-stand-in", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def entry(self) -> dict[str, Any]:
        """The ``mcpServers`` entry an agent is given for it."""
        return {"type": "http", "name": "stand-in", "url": self.url, "headers": []}

    def __enter__(self) -> McpStandIn:
        self._thread.start()
        if not self._ready.wait(60):
            raise RuntimeError("the stand-in MCP server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(setattr, self._server, "should_exit", True)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        import uvicorn
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        from control_plane.subagents.tools import build_server

        async def call(op: str, args: dict[str, Any], ctx: Any) -> dict[str, Any]:
            return {"ok": True, "result": {"standIn": op}}

        manager = StreamableHTTPSessionManager(
            app=build_server(call), stateless=True, json_response=True
        )
        config = uvicorn.Config(
            manager.handle_request,
            interface="asgi3",  # a bound method: uvicorn's guess would be ASGI 2
            lifespan="off",
            log_config=None,
            access_log=False,
        )
        self._server = uvicorn.Server(config)
        self._loop = asyncio.get_running_loop()
        async with manager.run():
            serving = asyncio.create_task(self._server.serve(sockets=[self._sock]))
            while not self._server.started and not serving.done():
                await asyncio.sleep(0.01)
            self._ready.set()
            await serving
