"""What a webhook is told: one event of the log as a ``Notification`` (its type, the session,
a line for people, the details a receiver acts on, the link to the session in the console).

One event gives a hook one notification at most, so its ``Idempotency-Key`` (the event id)
names one delivery: a failed turn of a batch task is ``task_failed`` for a hook that lists
it, else ``session_error``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from actors.delivery.hooks import NotifyType
from state_machines.event_kinds import EventKind
from store.queries.notify import NotifyEvent

_FAILURES = frozenset({EventKind.TURN_FAILED, EventKind.AGENT_START_FAILED})
_DIRECT: dict[str, NotifyType] = {
    EventKind.PERMISSION_REQUESTED: NotifyType.PERMISSION_REQUESTED,
    EventKind.TURN_ENDED: NotifyType.TURN_ENDED,
    EventKind.BUDGET_EXCEEDED: NotifyType.BUDGET_EXCEEDED,
}


@dataclass(frozen=True)
class Notification:
    type: NotifyType
    key: str  # the Idempotency-Key: the event's id (a test's: "test-<uuid>")
    title: str  # one line for people (Slack's text, ntfy's Title)
    time: float  # when the event was appended (unix seconds)
    link: str | None  # the session (or the permission) in the console
    event_id: int | None = None
    store_id: str | None = None
    session: dict[str, Any] | None = None  # id, agent, parentId, batch, task
    details: dict[str, Any] = field(default_factory=dict)


def console_link(base: str | None, session_id: str, permission: str | None = None) -> str | None:
    """``<base>/#/s/<session id>``, with ``?permission=<request id>`` for a permission's
    deep link (the console's routes, docs/console.md); None without a configured base."""
    if not base:
        return None
    link = f"{base.split('#', 1)[0].rstrip('/')}/#/s/{quote(session_id, safe='')}"
    if permission is not None:
        link += f"?permission={quote(permission, safe='')}"
    return link


def classify(found: NotifyEvent, wanted: frozenset[NotifyType]) -> NotifyType | None:
    """The type ``found`` is for a hook that wants ``wanted`` (None: not for it)."""
    kind = found.event.kind
    direct = _DIRECT.get(kind)
    if direct is not None:
        return direct if direct in wanted else None
    if kind in _FAILURES:
        if "batch" in found.metadata and NotifyType.TASK_FAILED in wanted:
            return NotifyType.TASK_FAILED
        if NotifyType.SESSION_ERROR in wanted:
            return NotifyType.SESSION_ERROR
    return None


def notification(
    found: NotifyEvent, kind: NotifyType, console_url: str | None, store_id: str
) -> Notification:
    event = found.event
    payload = event.payload
    session: dict[str, Any] = {"id": event.session_id, "agent": found.agent}
    if found.parent_id is not None:
        session["parentId"] = found.parent_id
    for name in ("batch", "task"):
        if name in found.metadata:
            session[name] = found.metadata[name]
    details: dict[str, Any] = {"kind": event.kind, "seq": event.seq}
    if event.command_id is not None:
        details["commandId"] = event.command_id
    permission = None
    who = f"{found.agent or 'agent'} {event.session_id[:8]}"
    if kind is NotifyType.PERMISSION_REQUESTED:
        permission = str(payload.get("requestId"))
        details |= {k: payload[k] for k in ("requestId", "toolCallId", "title") if k in payload}
        title = f"Permission needed: {payload.get('title') or 'a tool call'} ({who})"
    elif kind is NotifyType.TURN_ENDED:
        details |= {k: payload.get(k) for k in ("stopReason", "usage")}
        title = f"Turn ended: {payload.get('stopReason') or 'done'} ({who})"
    elif kind is NotifyType.BUDGET_EXCEEDED:
        details |= payload
        title = f"Budget exceeded: {payload.get('budget', 'a budget')} ({who})"
    else:
        details["error"] = payload.get("error")
        if kind is NotifyType.TASK_FAILED:
            title = f"Batch task {found.metadata.get('task')} failed: {payload.get('error')}"
        else:
            title = f"Session error: {payload.get('error')} ({who})"
    return Notification(
        type=kind,
        key=str(event.id),
        title=_one_line(title),
        time=event.created,
        link=console_link(console_url, event.session_id, permission),
        event_id=event.id,
        store_id=store_id,
        session=session,
        details=details,
    )


def test_notification(console_url: str | None) -> Notification:
    """What ``acpctl notify test`` sends: no session, no event; its own key."""
    return Notification(
        type=NotifyType.TEST,
        key=f"test-{uuid.uuid4()}",
        title="acpctl test notification",
        time=time.time(),
        link=console_url or None,
        details={"message": "If you read this, acpctl can reach this hook."},
    )


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
