"""The bridge's wire, for the stdio MCP server process: standard library only, so that the
process an agent without HTTP MCP starts for its subagent tools loads no SQLAlchemy, no
actors and no store (it starts while its agent's ``session/new`` waits for it).

One JSON object per line each way. Request ``{"session", "op", "args"}``; response
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``. The caller is who the
kernel says it is (``SO_PEERCRED``): there is no secret on the wire.
"""

from __future__ import annotations

import json
import socket
from typing import Any


def call_bridge(path: str, request: dict[str, Any], timeout: float = 600) -> dict[str, Any]:
    """A blocking client for the bridge (used by the MCP server process and by tests)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    answer: dict[str, Any] = json.loads(data)
    return answer
