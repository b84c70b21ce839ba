"""A bench agent in raw JSON-RPC over stdio (standard library only, starts in ~0.05 s): a
prompt ``#chunks=N`` streams N ``agent_message_chunk`` updates whose text is the wall-clock
time (ns) at which the agent wrote it, so a client on the same machine measures each
update's added latency (agent write to client read). Run isolated::

    python -I -S bench/stamp_agent.py
"""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main() -> None:
    sessions = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        method, msg_id, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if method == "initialize":
            result: dict[str, Any] = {"protocolVersion": 1, "agentCapabilities": {}}
        elif method == "session/new":
            sessions += 1
            result = {"sessionId": f"stamp-{sessions}"}
        elif method == "session/prompt":
            text = " ".join(b.get("text", "") for b in params.get("prompt") or [])
            found = re.search(r"#chunks=(\d+)", text)
            for _ in range(int(found.group(1)) if found else 1):
                update = {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": f"t={time.time_ns()} "},
                }
                _send(
                    {
                        "jsonrpc": "2.0",
                        "method": "session/update",
                        "params": {"sessionId": params.get("sessionId"), "update": update},
                    }
                )
            result = {"stopReason": "end_turn"}
        elif msg_id is None:
            continue  # a notification (session/cancel): nothing to do
        else:
            _send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32601, "message": method}})
            continue
        if msg_id is not None:
            _send({"jsonrpc": "2.0", "id": msg_id, "result": result})


if __name__ == "__main__":
    main()
