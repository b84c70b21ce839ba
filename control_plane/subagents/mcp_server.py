"""The stdio MCP server that gives an agent without HTTP MCP its subagent tools.

Started by the agent itself from the ``mcpServers`` entry the control plane passes in
``session/new`` (agents that advertise ``mcpCapabilities.http`` get the control plane's own
HTTP endpoint instead: ``http_tools.py``). Every tool call is forwarded to the control plane's
bridge over a local Unix socket with this session's id. No secret: the bridge asks the kernel
which process is calling (``SO_PEERCRED``) and serves it only if that process is below the
session's agent (``peers.py``).

    python -m control_plane.subagents.mcp_server --socket PATH --session ID
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from control_plane.subagents.tools import build_server
from control_plane.subagents.wire import call_bridge
from protocol.os_thread_name import name_this_thread


def forwarding_to(socket_path: str, session_id: str) -> Any:
    async def call(op: str, args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        request = {"session": session_id, "op": op, "args": args}
        return await asyncio.to_thread(call_bridge, socket_path, request)

    return call


def exit_with_bridge(socket_path: str) -> None:
    """Hold a connection to the bridge and end this process when it closes: the control
    plane that serves the tools is gone (killed, or stopped), so no tool call can succeed,
    and this process must not outlive it even if its agent leaves it behind."""
    import socket
    import threading

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(socket_path)
    except OSError as exc:
        print(f"the control plane's bridge {socket_path} is not there: {exc}", file=sys.stderr)
        sys.exit(1)

    def watch() -> None:
        name_this_thread()
        try:
            while sock.recv(4096):
                pass
        except OSError:
            pass
        os._exit(0)

    threading.Thread(target=watch, name="bridge-watch", daemon=True).start()


async def serve_stdio(server: Any) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--session", required=True)
    args = parser.parse_args(argv)
    exit_with_bridge(args.socket)
    asyncio.run(serve_stdio(build_server(forwarding_to(args.socket, args.session))))


if __name__ == "__main__":
    main()
