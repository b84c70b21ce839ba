"""Who may call the subagent bridge: one HMAC secret per session, derived from a key that
lives only in this process's memory, handed to the session's MCP server process in its env.

Built before the session actors exist (their launch settings ask it for ``mcpServers``),
so it needs nothing but the socket path."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sys
from typing import Any

from control_plane.subagents.wire import SECRET_ENV


class BridgeCredentials:
    def __init__(self, path: str) -> None:
        self.path = path  # the bridge's unix socket
        self._key = secrets.token_bytes(32)  # never written anywhere: a restart re-keys

    def secret_for(self, session_id: str) -> str:
        return hmac.new(self._key, session_id.encode(), hashlib.sha256).hexdigest()

    def accepts(self, session_id: str, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.secret_for(session_id).encode())

    def mcp_servers_for(self, session_id: str) -> list[dict[str, Any]]:
        """The ``mcpServers`` entry handed to the session's agent in ``session/new``."""
        return [
            {
                "name": "acp-control-plane",
                "command": sys.executable,
                "args": [
                    "-m",
                    "control_plane.subagents.mcp_server",
                    "--socket",
                    self.path,
                    "--session",
                    session_id,
                ],
                "env": [{"name": SECRET_ENV, "value": self.secret_for(session_id)}],
            }
        ]
