"""Permission requests of network clients: opened, then decided once (compare-and-set)."""

from __future__ import annotations

import time

from sqlalchemy import update

from state_machines.event_kinds import EventKind
from store.ops.events import append_events
from store.records import NewEvent
from store.schema import permission_requests as table
from store.writer import WriteContext

PENDING, ANSWERED, WITHDRAWN = "pending", "answered", "withdrawn"


def open_request(
    ctx: WriteContext,
    request_id: str,
    session_id: str,
    tool_call_id: str | None,
    title: str | None = None,
) -> None:
    """The row, and a ``permission_requested`` event in the session's log in the same
    transaction: webhooks (docs/notify.md) read the log, so a request on record is a
    request they are told of, after a crash too. A closed session refuses both."""
    ctx.conn.execute(
        table.insert().values(
            id=request_id,
            session_id=session_id,
            tool_call_id=tool_call_id,
            state=PENDING,
            created_at=time.time(),
        )
    )
    payload: dict[str, str] = {"requestId": request_id}
    if tool_call_id is not None:
        payload["toolCallId"] = tool_call_id
    if title:
        payload["title"] = title
    append_events(ctx, session_id, None, [NewEvent(EventKind.PERMISSION_REQUESTED, payload)])


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
