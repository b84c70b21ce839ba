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
