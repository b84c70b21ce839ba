"""Reads of the permission requests put to network clients (``permission_requests``, 0010)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, select

from store.schema import permission_requests


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
