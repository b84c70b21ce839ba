"""A tiny ACP agent in raw JSON-RPC over stdio, with the standard library only.

For tests and benchmarks that only need "a turn ran": it starts in ~0.05 s of CPU where the
example agent (the SDK and its schema) takes ~0.5 s. Run it as a script, isolated from site
packages, so the start stays that cheap::

    python -I -S protocol/example_agent/noop.py

It answers ``initialize`` and ``session/new``; a prompt streams one ``agent_message_chunk``
(``Echo: <text>``) and ends ``end_turn`` with a usage block; a prompt containing ``#hang``
waits until ``session/cancel`` for its session and then ends ``cancelled``. Every other
request gets -32601. It keeps no state on disk (no load, no history); use the example agent
for anything beyond turns.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

HANG = "#hang"


def command() -> tuple[str, ...]:
    """How to start it: this interpreter, isolated, on this file."""
    return (sys.executable, "-I", "-S", os.path.abspath(__file__))


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _answer(msg_id: Any, result: dict[str, Any]) -> None:
    _send({"jsonrpc": "2.0", "id": msg_id, "result": result})


def _prompt_text(params: dict[str, Any]) -> str:
    blocks = params.get("prompt") or []
    return " ".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict))


def _chunk(session_id: str, text: str) -> None:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    _send(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": session_id, "update": update},
        }
    )


def main() -> None:
    sessions = 0
    hanging: dict[str, Any] = {}  # session id -> the id of its prompt waiting for a cancel
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        msg_id, method = msg.get("id"), msg.get("method")
        params = msg.get("params") or {}
        if method == "session/cancel":
            waiting = hanging.pop(str(params.get("sessionId")), None)
            if waiting is not None:
                _answer(waiting, {"stopReason": "cancelled"})
            continue
        if msg_id is None or method is None:
            continue  # other notifications, and responses
        if method == "initialize":
            _answer(
                msg_id,
                {
                    "protocolVersion": params.get("protocolVersion", 1),
                    "agentCapabilities": {"loadSession": False},
                    "agentInfo": {"name": "noop-agent", "version": "0"},
                    "authMethods": [],
                },
            )
        elif method == "session/new":
            sessions += 1
            _answer(msg_id, {"sessionId": f"noop-{os.getpid()}-{sessions}"})
        elif method == "session/prompt":
            session_id = str(params.get("sessionId"))
            text = _prompt_text(params)
            if HANG in text:
                hanging[session_id] = msg_id
                continue
            _chunk(session_id, f"Echo: {text}")
            words = len(text.split())
            usage = {"inputTokens": words, "outputTokens": 1, "totalTokens": words + 1}
            _answer(msg_id, {"stopReason": "end_turn", "usage": usage})
        else:
            _send(
                {
                    "jsonrpc": "2.0",
                    "id": msg_id,
                    "error": {"code": -32601, "message": f"Method not found: {method}"},
                }
            )


if __name__ == "__main__":
    main()
