"""Agent output as the raw tap hands it to a recorder: (JSON text, parsed message)."""

from __future__ import annotations

import json
from typing import Any


def chunk_frame(i: int) -> tuple[str, dict[str, Any]]:
    """The ``session/update`` frame of one ``agent_message_chunk`` with text ``c<i> ``."""
    message = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": "acp-1",
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": f"c{i} "},
            },
        },
    }
    return json.dumps(message), message
