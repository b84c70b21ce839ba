"""A notification as the body and headers a hook's ``format`` asks for.

- ``json``: our schema (``version`` 1, docs/notify.md), for receivers we do not know.
- ``slack``: a Slack incoming webhook's ``{"text": ...}`` with the link in Slack's
  ``<url|label>`` markup (``&``, ``<``, ``>`` escaped as Slack wants).
- ``ntfy``: ntfy's plain-text body (the message), ``Title``, ``Click`` (the link), ``Tags``
  (emoji short codes) and ``Priority`` headers. Header values stay ASCII (HTTP/1.1 sends
  latin-1 only): the title header is built from the type, the text the agent wrote goes in
  the body, which is UTF-8.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from actors.delivery.hooks import Format, NotifyType
from actors.delivery.notifications import Notification

SCHEMA_VERSION = 1

_NTFY_TAGS = {
    NotifyType.PERMISSION_REQUESTED: "lock",
    NotifyType.TURN_ENDED: "white_check_mark",
    NotifyType.TASK_FAILED: "x",
    NotifyType.BUDGET_EXCEEDED: "money_with_wings",
    NotifyType.SESSION_ERROR: "rotating_light",
    NotifyType.TEST: "test_tube",
}
_URGENT = {NotifyType.PERMISSION_REQUESTED, NotifyType.TASK_FAILED, NotifyType.SESSION_ERROR}


def as_json(note: Notification) -> dict[str, Any]:
    """The ``json`` format's document (also what ``notify test --json`` shows)."""
    return {
        "version": SCHEMA_VERSION,
        "type": note.type.value,
        "id": note.key,
        "eventId": note.event_id,
        "storeId": note.store_id,
        "time": datetime.fromtimestamp(note.time, UTC).isoformat().replace("+00:00", "Z"),
        "session": note.session,
        "title": note.title,
        "link": note.link,
        "details": note.details,
    }


def render(fmt: Format, note: Notification) -> tuple[bytes, dict[str, str]]:
    """The body to POST (the bytes the signature is computed over) and its headers."""
    if fmt is Format.SLACK:
        text = _slack_escape(note.title)
        if note.link:
            text += f"\n<{note.link}|Open in the acpctl console>"
        return _dump({"text": text}), {"Content-Type": "application/json"}
    if fmt is Format.NTFY:
        headers = {
            "Content-Type": "text/plain; charset=utf-8",
            "Title": f"acpctl: {note.type.value.replace('_', ' ')}",
            "Tags": _NTFY_TAGS[note.type],
        }
        if note.type in _URGENT:
            headers["Priority"] = "high"
        if note.link:
            headers["Click"] = note.link
        return note.title.encode(), headers
    return _dump(as_json(note)), {"Content-Type": "application/json"}


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode()


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
