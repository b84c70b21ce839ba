"""Creating and revoking access tokens (the secret's digest is all that is written)."""

from __future__ import annotations

import secrets
import time

from sqlalchemy import or_, update

from state_machines import TokenNotFound
from store import queries
from store.schema import api_tokens
from store.tokens import TokenAccess, TokenRecord, TokenSessions
from store.writer import WriteContext


def create_token(
    ctx: WriteContext,
    name: str,
    secret_sha256: str,
    access: TokenAccess,
    sessions: TokenSessions,
) -> TokenRecord:
    record = TokenRecord(
        id="tok_" + secrets.token_hex(6),
        name=name,
        access=access,
        sessions=sessions,
        created_at=time.time(),
        revoked_at=None,
    )
    ctx.conn.execute(
        api_tokens.insert().values(
            id=record.id,
            name=name,
            secret_sha256=secret_sha256,
            access=access.value,
            sessions=sessions.value,
            created_at=record.created_at,
        )
    )
    return record


def revoke_token(ctx: WriteContext, name_or_id: str) -> list[TokenRecord]:
    """Revoke every active token with that name (or that id); the revoked records."""
    matching = (api_tokens.c.name == name_or_id) | (api_tokens.c.id == name_or_id)
    found = [t for t in queries.list_tokens(ctx.conn) if t.active and name_or_id in (t.name, t.id)]
    if not found:
        raise TokenNotFound(name_or_id)
    now = time.time()
    ctx.conn.execute(
        update(api_tokens)
        .where(or_(matching), api_tokens.c.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    return [queries.token_by_id(ctx.conn, t.id) for t in found]
