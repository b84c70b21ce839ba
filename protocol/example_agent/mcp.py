"""The example agent as an MCP client: calling the tools a client offers in ``mcpServers``.

Real agents (Claude Code, Codex) call the MCP tools they are given; so does the example agent
when a prompt asks for it (``#spawn=...``, ``#list-subagents``, ...), which lets tests and the
demo drive the control plane's subagent tools end to end. Only stdio MCP servers are used.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any


def stdio_server(servers: Sequence[Any], name: str | None = None) -> Any | None:
    """The first stdio MCP server offered (optionally by name)."""
    for server in servers:
        command = getattr(server, "command", None)
        if command and (name is None or getattr(server, "name", None) == name):
            return server
    return None


@asynccontextmanager
async def mcp_session(server: Any) -> AsyncIterator[Any]:
    """An initialized MCP client session to a stdio server (started here, ended on exit)."""
    from mcp.client.session import ClientSession
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
