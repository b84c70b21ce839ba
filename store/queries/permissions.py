"""Reads of the permission requests put to network clients (``permission_requests``, 0010)
and of the request each was (its ``permission_requested`` event)."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select

from state_machines.event_kinds import EventKind
from store.schema import events, permission_requests

# How much earlier than its row a request's event may be stamped: both are written in one
# transaction of one node, so the gap is the transaction's own length; generous.
_EVENT_SLACK_S = 60.0


@dataclass(frozen=True)
class PermissionRecord:
    """One row of ``permission_requests`` (the request id is the JSON-RPC id that
    ``serve --listen`` puts to its clients)."""

    id: str
    session_id: str
    tool_call_id: str | None
    state: str  # pending, answered, withdrawn
    option_id: str | None  # None when answered: "cancelled"
    decided_by: str | None  # the answering token's name
    created_at: float
    decided_at: float | None


def permission_record(conn: Connection, request_id: str) -> PermissionRecord | None:
    row = conn.execute(
        select(permission_requests).where(permission_requests.c.id == request_id)
    ).first()
    return None if row is None else PermissionRecord(**row._mapping)


def permission_records(conn: Connection, request_ids: Collection[str]) -> list[PermissionRecord]:
    """The rows of these requests (the ones that exist)."""
    if not request_ids:
        return []
    rows = conn.execute(
        select(permission_requests).where(permission_requests.c.id.in_(list(request_ids)))
    )
    return [PermissionRecord(**row._mapping) for row in rows]


def pending_permissions(
    conn: Connection, session_ids: Collection[str]
) -> list[tuple[PermissionRecord, dict[str, Any] | None]]:
    """The requests of these sessions still waiting for an answer (by the session index),
    each with its request as put to clients (``permission_params``)."""
    if not session_ids:
        return []
    rows = conn.execute(
        select(permission_requests).where(
            permission_requests.c.session_id.in_(list(session_ids)),
            permission_requests.c.state == "pending",
        )
    )
    found = [PermissionRecord(**row._mapping) for row in rows]
    return [(record, permission_params(conn, record)) for record in found]


def permission_params(conn: Connection, record: PermissionRecord) -> dict[str, Any] | None:
    """The request as it was put to clients: ``{"toolCall": ..., "options": [...]}`` from
    its ``permission_requested`` event; None if the event does not carry them (requests
    recorded before they did)."""
    rows = conn.execute(
        select(events.c.payload)
        .where(
            events.c.session_id == record.session_id,
            events.c.kind == EventKind.PERMISSION_REQUESTED.value,
            events.c.created_at >= record.created_at - _EVENT_SLACK_S,
        )
        .order_by(events.c.seq)
    )
    for (text,) in rows:
        payload = json.loads(text)
        if isinstance(payload, dict) and payload.get("requestId") == record.id:
            return request_params(payload)
    return None


def request_params(payload: dict[str, Any]) -> dict[str, Any] | None:
    """``{"toolCall", "options"}`` of a ``permission_requested`` payload, if it has them."""
    tool_call, options = payload.get("toolCall"), payload.get("options")
    if not isinstance(tool_call, dict) or not isinstance(options, list):
        return None
    return {"toolCall": tool_call, "options": options}
