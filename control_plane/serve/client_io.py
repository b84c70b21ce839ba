"""What serve sends its client, and what it reads from the client's requests."""

from __future__ import annotations

import asyncio
from typing import Any

from acp.agent.connection import AgentSideConnection

from protocol import json_codec


async def send_queued(
    client: AgentSideConnection, session_id: str, updates: list[dict[str, Any]]
) -> None:
    """Updates that belong to no prompt, through the SDK's own sender: its queue orders
    them after answers already queued (``session/new``'s), which a write of our own
    could overtake. Raw dicts, so that no update kind is dropped."""
    sender = client._conn  # the SDK's JSON-RPC connection under the typed one
    for update in updates:
        await sender.send_notification(
            "session/update", {"sessionId": session_id, "update": update}
        )


async def write_updates(
    out: asyncio.StreamWriter, session_id: str, updates: list[dict[str, Any]]
) -> None:
    """``session/update`` notifications, raw (the SDK's typed path would drop update
    kinds its models do not know), written as one block on the client stream. Not
    through the SDK's sender: it awaits a queue hand-off and a drain per message, which
    cost more than the whole rest of forwarding a 100-update turn. Each message is one
    ``write`` of whole lines, so nothing interleaves with the SDK's own messages, and
    the prompt's response (sent by the SDK after ``prompt`` returns) comes after."""
    if not updates:
        return
    blob = b"\n".join(
        json_codec.dumps(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {"sessionId": session_id, "update": update},
            }
        )
        for update in updates
    )
    out.write(blob + b"\n")
    await out.drain()


def session_id_field(session_id: str) -> str:
    """``"sessionId":"<id>"`` as serve's client gets it (for ``forwarded_line``)."""
    return f'"sessionId":{json_codec.dumps(session_id).decode()}'


def forwarded_line(raw: str, parsed: Any, session_field: str) -> bytes | None:
    """The agent's ``session/update`` frame as serve's client gets it, without parsing or
    serializing anything again: the frame's text with the backend's ACP session id replaced
    by the session's id, when the frame spells it exactly once as ``"sessionId":"<id>"``
    (compact JSON, which every agent here writes). None otherwise: the caller builds the
    message from the update object then."""
    try:
        acp_id = parsed["params"]["sessionId"]
    except (KeyError, TypeError):
        return None
    if not isinstance(acp_id, str) or '"' in acp_id or "\\" in acp_id:
        return None
    needle = f'"sessionId":"{acp_id}"'
    if raw.count(needle) != 1:
        return None
    return raw.replace(needle, session_field).encode()


async def write_lines(out: asyncio.StreamWriter, lines: list[bytes]) -> None:
    """Whole JSON-RPC lines written as one block on the client stream (see write_updates)."""
    if not lines:
        return
    out.write(b"\n".join(lines) + b"\n")
    await out.drain()


def update_line(session_id: str, update: dict[str, Any]) -> bytes:
    return json_codec.dumps(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": session_id, "update": update},
        }
    )


def plain_list(servers: Any) -> list[dict[str, Any]]:
    """The client's MCP server objects as plain JSON dicts."""
    out = []
    for server in servers or []:
        dumped = (
            server
            if isinstance(server, dict)
            else server.model_dump(by_alias=True, exclude_none=True)
        )
        out.append(dict(dumped))
    return out


def idempotency_key(meta: dict[str, Any]) -> str | None:
    """A client may put ``idempotencyKey`` in a request's ``_meta``; without one, a retried
    request is a new command."""
    value = meta.get("idempotencyKey")
    if value is None and isinstance(meta.get("field_meta"), dict):
        value = meta["field_meta"].get("idempotencyKey")
    return None if value is None else str(value)
