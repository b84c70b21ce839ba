"""The example agent as an MCP client: calling the tools a client offers in ``mcpServers``.

Real agents (Claude Code, Codex) call the MCP tools they are given; so does the example agent
when a prompt asks for it (``#spawn=...``, ``#list-subagents``, ...), which lets tests and the
demo drive the control plane's subagent tools end to end. It speaks MCP over stdio and over
Streamable HTTP (unless started with ``--no-http-mcp``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any


def usable_server(servers: Sequence[Any], http: bool, name: str | None = None) -> Any | None:
    """The first MCP server offered (optionally by name) that this agent can reach: a stdio
    one, or an HTTP one when ``http``."""
    for server in servers:
        if name is not None and getattr(server, "name", None) != name:
            continue
        if getattr(server, "command", None) or (http and getattr(server, "url", None)):
            return server
    return None


def claiming(server: Any, other: str) -> Any:
    """The offered server entry made to name session ``other`` instead of this agent's own:
    the segment after ``/sessions/`` of an HTTP server's URL, the value after ``--session``
    of a stdio server's arguments."""
    url = getattr(server, "url", None)
    if url:
        head, sep, tail = url.partition("/sessions/")
        rest = tail.partition("/")[2]
        return server.model_copy(update={"url": f"{head}{sep}{other}/{rest}"})
    args = list(server.args or [])
    if "--session" in args:
        args[args.index("--session") + 1] = other
    return server.model_copy(update={"args": args})


@asynccontextmanager
async def mcp_session(server: Any) -> AsyncIterator[Any]:
    """An initialized MCP client session to a server: over HTTP for an entry with a URL,
    else over the stdio of a process started here (ended on exit)."""
    from mcp.client.session import ClientSession

    url = getattr(server, "url", None)
    if url:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        headers = {item.name: item.value for item in getattr(server, "headers", None) or []}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(90.0)) as http,
            streamable_http_client(url, http_client=http) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            yield session
        return
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {item.name: item.value for item in getattr(server, "env", None) or []}
    params = StdioServerParameters(command=server.command, args=list(server.args or []), env=env)
    async with stdio_client(params) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def call(session: Any, tool: str, arguments: dict[str, Any]) -> str:
    """Call one tool; its text content, or ``error: ...`` when the tool failed."""
    result = await session.call_tool(tool, arguments)
    text = "".join(getattr(block, "text", "") for block in getattr(result, "content", []) or [])
    if getattr(result, "is_error", False) or getattr(result, "isError", False):
        return f"error: {text}"
    return text


def reason(exc: BaseException) -> str:
    """What went wrong, from the innermost error (task groups wrap them in groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
