"""The per-session MCP server that gives an agent its subagent tools.

Started by the agent itself (stdio) from the ``mcpServers`` entry the control plane passes in
``session/new``. Every tool call is forwarded to the control plane's subagent bridge over a
local Unix socket, with this session's id and its secret (from the environment, never the
command line, so it does not show in a process listing).

    python -m control_plane.subagents.mcp_server --socket PATH --session ID
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from control_plane.subagents.wire import SECRET_ENV, call_bridge
from protocol.os_thread_name import name_this_thread


def build_server(socket_path: str, session_id: str, secret: str) -> Any:
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer(name="acp-control-plane", version="0.1.0")

    async def forward(op: str, args: dict[str, Any]) -> str:
        request = {"session": session_id, "secret": secret, "op": op, "args": args}
        answer = await asyncio.to_thread(call_bridge, socket_path, request)
        if not answer.get("ok"):
            # ToolError: the agent reads the reason (a limit, a refusal) and can react.
            raise ToolError(answer.get("error") or "refused")
        return json.dumps(answer["result"])

    @server.tool(
        description=(
            "Start a subagent on a task. mode: run (ends after its first answer, the "
            "default) or session (stays open for send_to_subagent). Its result is "
            "announced to you when it finishes."
        )
    )
    async def spawn_subagent(task: str, agent: str | None = None, mode: str = "run") -> str:
        return await forward("spawn_subagent", {"task": task, "agent": agent, "mode": mode})

    @server.tool(description="List your subagents (and theirs) with their states.")
    async def list_subagents() -> str:
        return await forward("list_subagents", {})

    @server.tool(
        description=(
            "A subagent's latest result; wait up to `wait` seconds for it (a finite number "
            ">= 0; at most 60, a longer wait is cut to 60). If the run has not ended by "
            'then the answer has status "running": call again to keep waiting.'
        )
    )
    async def subagent_result(id: str, wait: float = 0) -> str:
        return await forward("subagent_result", {"id": id, "wait": wait})

    @server.tool(description="Send a follow-up message to a subagent started with mode=session.")
    async def send_to_subagent(id: str, message: str) -> str:
        return await forward("send_to_subagent", {"id": id, "message": message})

    @server.tool(description="Cancel a subagent's running work.")
    async def cancel_subagent(id: str) -> str:
        return await forward("cancel_subagent", {"id": id})

    return server


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--session", required=True)
    args = parser.parse_args(argv)
    secret = os.environ.get(SECRET_ENV, "")
    if not secret:
        print(f"{SECRET_ENV} is not set; refusing to start", file=sys.stderr)
        sys.exit(2)
    exit_with_bridge(args.socket)
    build_server(args.socket, args.session, secret).run("stdio")


if __name__ == "__main__":
    main()
