"""What each session's agent is offered for its subagent tools in ``session/new``: the
control plane's HTTP endpoint when the agent speaks HTTP MCP, else the stdio MCP server
(``mcp_server.py``) that reaches the bridge's Unix socket. No entry carries a secret.

Made before the session actors exist (their launch settings ask it for ``mcpServers``); the
bridge and the HTTP endpoint are attached once the control plane is built.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from control_plane.subagents.peers import AgentTrees

if TYPE_CHECKING:
    from control_plane.subagents.http_tools import HttpTools


class ToolsOffer:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path  # the bridge's Unix socket (the stdio server's way in)
        self.trees = AgentTrees()
        self.http: HttpTools | None = None

    def mcp_servers_for(
        self, session_id: str, process_tree: dict[str, Any] | None, http: bool
    ) -> list[dict[str, Any]]:
        """The ``mcpServers`` entry for a session whose agent runs in ``process_tree`` (its
        reaper's pid and start time) and does (``http``) or does not speak HTTP MCP. An
        agent whose tree is unknown is offered no tools: no call of it could be told apart
        from anyone else's."""
        if not process_tree or not process_tree.get("reaperPid"):
            return []
        self.trees.bind(
            session_id, int(process_tree["reaperPid"]), int(process_tree["reaperStart"])
        )
        if http and self.http is not None:
            return [self.http.entry_for(session_id)]
        return [
            {
                "name": "acp-control-plane",
                "command": sys.executable,
                "args": [
                    "-m",
                    "control_plane.subagents.mcp_server",
                    "--socket",
                    self.socket_path,
                    "--session",
                    session_id,
                ],
                "env": [],
            }
        ]
