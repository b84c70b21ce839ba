"""Permission requests of network clients: opened, then decided once (compare-and-set)."""

from __future__ import annotations

import time

from sqlalchemy import update

from store.schema import permission_requests as table
from store.writer import WriteContext

PENDING, ANSWERED, WITHDRAWN = "pending", "answered", "withdrawn"


def open_request(
    ctx: WriteContext, request_id: str, session_id: str, tool_call_id: str | None
) -> None:
    ctx.conn.execute(
        table.insert().values(
            id=request_id,
            session_id=session_id,
            tool_call_id=tool_call_id,
            state=PENDING,
            created_at=time.time(),
        )
    )


def decide(ctx: WriteContext, request_id: str, option_id: str | None, decided_by: str) -> bool:
    """Record the answer if the request is still pending; whether this answer won."""
    done = ctx.conn.execute(
        update(table)
        .where(table.c.id == request_id, table.c.state == PENDING)
        .values(state=ANSWERED, option_id=option_id, decided_by=decided_by, decided_at=time.time())
    )
    return done.rowcount == 1


def withdraw(ctx: WriteContext, request_id: str) -> bool:
    """The request ended unanswered; whether it was still pending."""
    done = ctx.conn.execute(
        update(table)
        .where(table.c.id == request_id, table.c.state == PENDING)
        .values(state=WITHDRAWN, decided_at=time.time())
    )
    return done.rowcount == 1
