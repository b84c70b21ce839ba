"""One permission request as a node holds it while it waits (asked here, or mirrored from
another node), and the small pure pieces of answering it: the option a client's response
chose, and how a request was settled (``state``, ``optionId``, ``decidedBy``: what
``permission_settled`` says and what ``$/cancel_request`` carries in ``_meta.acpctl``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from control_plane.remote.roles import PermissionClient
from store.ops.permissions import ANSWERED
from store.queries.permissions import PermissionRecord


@dataclass
class PendingPermission:
    request_id: str
    session_id: str
    params: dict[str, Any]  # sessionId, toolCall, options: the request as put to clients
    answer: asyncio.Future[str | None] | None  # None: another node asks (a mirror here)
    asked: set[PermissionClient] = field(default_factory=set)
    winner: PermissionClient | None = None
    recorded: bool = False  # on record: it may be put to clients
    outcome: dict[str, Any] | None = None  # how it was settled (state, optionId, decidedBy)
    # Answers of this node being decided now: the log's word on the request waits for them
    # (the winner's own settlement comes through the feed before its decide returns).
    deciding: int = 0

    @property
    def valid_options(self) -> set[str]:
        options = self.params.get("options", [])
        return {str(o.get("optionId")) for o in options if isinstance(o, dict)}

    def message(self) -> dict[str, Any]:
        return {
            "jsonrpc": "2.0",
            "id": self.request_id,
            "method": "session/request_permission",
            "params": self.params,
        }


def answered_outcome(option_id: str | None, decided_by: str) -> dict[str, Any]:
    return {"state": ANSWERED, "optionId": option_id, "decidedBy": decided_by}


def settled_outcome(payload: dict[str, Any]) -> dict[str, Any]:
    return {k: payload[k] for k in ("state", "optionId", "decidedBy") if k in payload}


def recorded_outcome(record: PermissionRecord) -> dict[str, Any]:
    if record.state == ANSWERED:
        return answered_outcome(record.option_id, record.decided_by or "")
    return {"state": record.state}


INVALID = object()


def chosen_option(message: dict[str, Any], valid: set[str]) -> object:
    """The option chosen, None for "cancelled", or ``INVALID``."""
    result = message.get("result")
    if not isinstance(result, dict) or not isinstance(result.get("outcome"), dict):
        return INVALID
    outcome = result["outcome"]
    if outcome.get("outcome") == "cancelled":
        return None
    if outcome.get("outcome") == "selected" and outcome.get("optionId") in valid:
        return outcome["optionId"]
    return INVALID
