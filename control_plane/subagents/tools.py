"""The five subagent tools an agent is offered, and the MCP server that answers them.

One definition for both transports: the control plane's own HTTP endpoint
(``http_tools.py``) and the stdio MCP process for agents without HTTP MCP
(``mcp_server.py``). Each is given ``call(op, args, ctx)``, which carries the tool call to the
bridge for the session the transport vouches for and returns the bridge's answer
(``{"ok": ..., "result" | "error": ...}``).

Built on the MCP SDK's low-level server, not its high-level ``MCPServer``: the latter sets
up the root logger on construction (a Rich handler at INFO), which is not a library's
business inside the control plane's process, and the tools' schemas are plain JSON here.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

SERVER_NAME = "acp-control-plane"

TOOLS: list[dict[str, Any]] = [
    {
        "name": "spawn_subagent",
        "description": (
            "Start a subagent on a task. mode: run (ends after its first answer, the "
            "default) or session (stays open for send_to_subagent). Its result is "
            "announced to you when it finishes."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "task": {"type": "string"},
                "agent": {
                    "type": ["string", "null"],
                    "default": None,
                    "description": "The child's agent: a name (claude, codex, gemini, a "
                    "configured one) or a command line; default: this session's agent.",
                },
                "mode": {"type": "string", "enum": ["run", "session"], "default": "run"},
            },
            "required": ["task"],
        },
    },
    {
        "name": "list_subagents",
        "description": "List your subagents (and theirs) with their states.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "subagent_result",
        "description": (
            "A subagent's latest result; wait up to `wait` seconds for it (a finite number "
            ">= 0; at most 60, a longer wait is cut to 60). If the run has not ended by "
            'then the answer has status "running": call again to keep waiting.'
        ),
        "inputSchema": {
            "type": "object",
            "properties": {"id": {"type": "string"}, "wait": {"type": "number", "default": 0}},
            "required": ["id"],
        },
    },
    {
        "name": "send_to_subagent",
        "description": "Send a follow-up message to a subagent started with mode=session.",
        "inputSchema": {
            "type": "object",
            "properties": {"id": {"type": "string"}, "message": {"type": "string"}},
            "required": ["id", "message"],
        },
    },
    {
        "name": "cancel_subagent",
        "description": "Cancel a subagent's running work.",
        "inputSchema": {
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "required": ["id"],
        },
    },
]

TOOL_NAMES = frozenset(tool["name"] for tool in TOOLS)

# The bridge's answer to one tool call, given (op, args, the SDK's request context).
Call = Callable[[str, dict[str, Any], Any], Awaitable[dict[str, Any]]]


def build_server(call: Call) -> Any:
    """The MCP server (the SDK's low-level ``Server``) offering the tools through ``call``."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    listed = types.ListToolsResult(
        tools=[
            types.Tool(
                name=tool["name"], description=tool["description"], input_schema=tool["inputSchema"]
            )
            for tool in TOOLS
        ]
    )

    async def list_tools(ctx: Any, params: Any) -> Any:
        return listed

    async def call_tool(ctx: Any, params: Any) -> Any:
        if params.name not in TOOL_NAMES:
            answer: dict[str, Any] = {"ok": False, "error": f"unknown tool {params.name!r}"}
        else:
            answer = await call(params.name, dict(params.arguments or {}), ctx)
        if answer.get("ok"):
            text, failed = json.dumps(answer.get("result")), False
        else:
            # A tool error, not a protocol error: the agent reads the reason (a limit, a
            # refusal) and can react.
            text, failed = str(answer.get("error") or "refused"), True
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=failed
        )

    return Server(SERVER_NAME, version="0.1.0", on_list_tools=list_tools, on_call_tool=call_tool)
