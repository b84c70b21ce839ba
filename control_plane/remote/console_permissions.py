"""A permission request as recorded, for the console's deep link
(``#/s/<session>?permission=<request id>``, the link a webhook sends): the page lands on the
request's card while it waits, and says how it was decided once it was.

- ``GET /api/sessions/{id}/permissions/{request}``: ``{id, sessionId, toolCallId, state,
  optionId, decidedBy, createdAt, decidedAt}``; ``state`` is ``pending``, ``answered``
  (``optionId`` null: answered "cancelled") or ``withdrawn`` (the turn was cancelled, the
  wait timed out, or the server stopped).

The request id is the ``permission_requests`` row's id, which is also the JSON-RPC id of the
``session/request_permission`` that ``serve --listen`` puts to its clients
(``control_plane/remote/permissions.py``): the page matches the two directly.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from control_plane.remote.auth import error_response, unauthorized
from control_plane.remote.console_api import Refused, answer, request_token, seen
from control_plane.remote.hub import Hub
from store.tokens import TokenRecord


def _iso(stamp: float | None) -> str | None:
    return None if stamp is None else datetime.fromtimestamp(stamp, UTC).isoformat()


def _read(hub: Hub, token: TokenRecord, session_id: str, request_id: str) -> dict[str, Any]:
    seen(hub, token, session_id)
    found = hub.cp.permission_request(request_id)
    if found is None or found.session_id != session_id:
        raise Refused(404, f"session {session_id} has no permission request {request_id}")
    return {
        "id": found.id,
        "sessionId": found.session_id,
        "toolCallId": found.tool_call_id,
        "state": found.state,
        "optionId": found.option_id,
        "decidedBy": found.decided_by,
        "createdAt": _iso(found.created_at),
        "decidedAt": _iso(found.decided_at),
    }


async def permission(request: Request) -> Response:
    request_id = request.path_params["request"]
    if len(request_id) > 200:
        if request_token(request) is None:
            return unauthorized()
        return error_response(400, "not a permission request id (too long)")
    return await answer(request, _read, request_id)


ROUTES = [Route("/api/sessions/{id}/permissions/{request}", permission)]
