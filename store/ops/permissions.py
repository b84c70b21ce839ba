"""Permission requests of network clients: opened, then settled once (compare-and-set).

A request and its settlement are each written with an event in the session's log, in the
same transaction as the row: ``permission_requested`` carries everything a node needs to put
the request to its own clients (the agent's tool call and options), ``permission_settled``
says how it ended (answered, with the option and the answering token's name; or withdrawn).
Every node that follows the session reads both from the log, so a request asked on one node
is answered from any (control_plane/remote/permissions.py)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import select, update

from state_machines import SessionState
from state_machines.event_kinds import EventKind
from store.ops._shared import notify_session
from store.ops.events import append_events
from store.records import NewEvent
from store.schema import permission_requests as table
from store.schema import sessions
from store.writer import WriteContext

PENDING, ANSWERED, WITHDRAWN = "pending", "answered", "withdrawn"


def open_request(
    ctx: WriteContext,
    request_id: str,
    session_id: str,
    tool_call: dict[str, Any],
    options: list[dict[str, Any]],
) -> None:
    """The row, and a ``permission_requested`` event in the session's log in the same
    transaction: webhooks (docs/notify.md) and the other nodes read the log, so a request on
    record is a request they are told of, after a crash too. A closed session refuses both.

    The payload: ``requestId``, ``toolCallId`` and ``title`` (what webhooks show), and the
    request's ``toolCall`` as the agent sent it and its ``options`` (what another node puts
    to its clients). Nothing secret: the same tool call is in the log as a session update."""
    tool_call_id = tool_call.get("toolCallId")
    tool_call_id = tool_call_id if isinstance(tool_call_id, str) else None
    ctx.conn.execute(
        table.insert().values(
            id=request_id,
            session_id=session_id,
            tool_call_id=tool_call_id,
            state=PENDING,
            created_at=time.time(),
        )
    )
    payload: dict[str, Any] = {"requestId": request_id}
    if tool_call_id is not None:
        payload["toolCallId"] = tool_call_id
    title = tool_call.get("title")
    if isinstance(title, str) and title:
        payload["title"] = title
    payload["toolCall"] = tool_call
    payload["options"] = options
    append_events(ctx, session_id, None, [NewEvent(EventKind.PERMISSION_REQUESTED, payload)])


def decide(ctx: WriteContext, request_id: str, option_id: str | None, decided_by: str) -> bool:
    """Record the answer if the request is still pending; whether this answer won. The
    winner's transaction also appends ``permission_settled`` and notifies the session's
    owner and watchers (on PostgreSQL, at once). ``SessionClosed`` for a request of a closed
    session (nothing is recorded: the session's log is final)."""
    session_id = _settle(ctx, request_id, ANSWERED, option_id=option_id, decided_by=decided_by)
    if session_id is None:
        return False
    settled = {"requestId": request_id, "state": ANSWERED, "optionId": option_id}
    settled["decidedBy"] = decided_by
    append_events(ctx, session_id, None, [NewEvent(EventKind.PERMISSION_SETTLED, settled)])
    notify_session(ctx, session_id)
    return True


def withdraw(ctx: WriteContext, request_id: str) -> bool:
    """The request ended unanswered; whether it was still pending. Said in the log too
    (unless the session is closed: its log is final, and its close says enough)."""
    session_id = _settle(ctx, request_id, WITHDRAWN)
    if session_id is None:
        return False
    state = ctx.conn.execute(select(sessions.c.state).where(sessions.c.id == session_id))
    if state.scalar() != SessionState.CLOSED.value:
        settled = {"requestId": request_id, "state": WITHDRAWN}
        append_events(ctx, session_id, None, [NewEvent(EventKind.PERMISSION_SETTLED, settled)])
        notify_session(ctx, session_id)
    return True


def withdraw_for_sessions(ctx: WriteContext, session_ids: set[str]) -> list[str]:
    """Withdraw every request still pending in these sessions, whose agent is gone with a
    dead owner (store/ops/recovery.py): nobody is left to hand an answer to, and a request
    left pending would be put to every node's clients for ever. Each is said in the log as
    any withdrawal is. The requests withdrawn, oldest first."""
    if not session_ids:
        return []
    pending = ctx.conn.execute(
        select(table.c.id)
        .where(table.c.session_id.in_(session_ids), table.c.state == PENDING)
        .order_by(table.c.created_at)
    ).scalars()
    return [request_id for request_id in list(pending) if withdraw(ctx, request_id)]


def _settle(ctx: WriteContext, request_id: str, state: str, **values: Any) -> str | None:
    """The compare-and-set: pending -> ``state``; the session's id if this write did it."""
    row = ctx.conn.execute(
        update(table)
        .where(table.c.id == request_id, table.c.state == PENDING)
        .values(state=state, decided_at=time.time(), **values)
        .returning(table.c.session_id)
    ).first()
    return None if row is None else str(row[0])
