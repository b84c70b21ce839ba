"""Reads of access tokens."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from store.schema import api_tokens
from store.tokens import TokenAccess, TokenRecord, TokenSessions


def _record(row: Any) -> TokenRecord:
    return TokenRecord(
        id=row.id,
        name=row.name,
        access=TokenAccess(row.access),
        sessions=TokenSessions(row.sessions),
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


def token_by_digest(conn: Connection, secret_sha256: str) -> TokenRecord | None:
    """The active token whose secret has this digest (revoked ones are not found)."""
    row = conn.execute(
        select(api_tokens).where(
            api_tokens.c.secret_sha256 == secret_sha256, api_tokens.c.revoked_at.is_(None)
        )
    ).first()
    return None if row is None else _record(row)


def token_by_id(conn: Connection, token_id: str) -> TokenRecord:
    row = conn.execute(select(api_tokens).where(api_tokens.c.id == token_id)).one()
    return _record(row)


def list_tokens(conn: Connection) -> list[TokenRecord]:
    rows = conn.execute(select(api_tokens).order_by(api_tokens.c.created_at, api_tokens.c.id))
    return [_record(row) for row in rows]
