"""A permission request as recorded, for the console's deep link
(``#/s/<session>?permission=<request id>``, the link a webhook sends): the page lands on the
request's card while it waits, and says how it was decided once it was.

- ``GET /api/sessions/{id}/permissions/{request}``: ``{id, sessionId, toolCallId, state,
  optionId, decidedBy, createdAt, decidedAt}``; ``state`` is ``pending``, ``answered``
  (``optionId`` null: answered "cancelled") or ``withdrawn`` (the turn was cancelled, the
  wait timed out, or the server stopped).

- ``POST /api/sessions/{id}/permissions/{request}`` with ``{"optionId": "..."}`` (one of the
  request's options) or ``{"outcome": "cancelled"}`` (a control token; ``Content-Type:
  application/json``): answers the request, whichever node asked it (the compare-and-set
  in the store decides, and the asking node hears of it, docs/remote.md). 200: the record
  as above, now ``answered``. 409 when another answer won first or the request was
  withdrawn: ``{"error", "code": "already_answered", "state", "optionId", "decidedBy"}``.
  400 for an option the request does not offer, 403 for a watch-only token, 404 for an
  unknown request.

The request id is the ``permission_requests`` row's id, which is also the JSON-RPC id of the
``session/request_permission`` that ``serve --listen`` puts to its clients
(``control_plane/remote/permissions.py``): the page matches the two directly.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from control_plane.remote.auth import error_response, unauthorized
from control_plane.remote.console_api import Refused, answer, request_token, seen
from control_plane.remote.hub import Hub
from control_plane.remote.permission_errors import (
    PermissionAlreadyAnswered,
    PermissionAnswerInvalid,
    PermissionNotFound,
)
from state_machines import SessionNotFound
from store.queries.permissions import PermissionRecord
from store.tokens import TokenAccess, TokenRecord

MAX_ANSWER_BYTES = 4096


def _iso(stamp: float | None) -> str | None:
    return None if stamp is None else datetime.fromtimestamp(stamp, UTC).isoformat()


def _read(hub: Hub, token: TokenRecord, session_id: str, request_id: str) -> dict[str, Any]:
    seen(hub, token, session_id)
    found = hub.cp.permission_request(request_id)
    if found is None or found.session_id != session_id:
        raise Refused(404, f"session {session_id} has no permission request {request_id}")
    return _record_json(found)


def _record_json(found: PermissionRecord) -> dict[str, Any]:
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
    if request.method == "POST":
        return await _answer(request, request_id)
    return await answer(request, _read, request_id)


async def _answer(request: Request, request_id: str) -> Response:
    token = request_token(request)
    if token is None:
        return unauthorized()
    if token.access is not TokenAccess.CONTROL:
        return error_response(403, f"token {token.name!r} is watch-only: it cannot answer")
    if not request.headers.get("content-type", "").lower().startswith("application/json"):
        return error_response(415, "Content-Type must be application/json")
    body = bytearray()
    async for chunk in request.stream():  # read no further than an answer can be long
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            break
    choice = _chosen(bytes(body))
    if isinstance(choice, Response):
        return choice
    hub: Hub = request.app.state.hub
    session_id = request.path_params["id"]
    try:
        await asyncio.to_thread(seen, hub, token, session_id)
        record = await hub.permissions.answer(session_id, request_id, choice, token.name)
    except SessionNotFound:
        return error_response(404, "no such session")
    except Refused as exc:
        return error_response(exc.status, str(exc))
    except PermissionNotFound as exc:
        return error_response(404, str(exc))
    except PermissionAnswerInvalid as exc:
        return error_response(400, str(exc))
    except PermissionAlreadyAnswered as exc:
        settled = {"state": exc.state, "optionId": exc.option_id, "decidedBy": exc.decided_by}
        return JSONResponse({"error": str(exc), "code": exc.code, **settled}, status_code=409)
    return JSONResponse(_record_json(record))


def _chosen(body: bytes) -> str | Response | None:
    """The option chosen (None: cancelled), or the 400 that says what is wrong."""
    if len(body) > MAX_ANSWER_BYTES:
        return error_response(400, "an answer is a small JSON object")
    try:
        given = json.loads(body)
    except ValueError:
        return error_response(400, "the body is not JSON")
    if isinstance(given, dict) and given.get("outcome") == "cancelled" and len(given) == 1:
        return None
    if isinstance(given, dict) and isinstance(given.get("optionId"), str) and len(given) == 1:
        return str(given["optionId"])
    return error_response(
        400, 'answer {"optionId": "<one of its options>"} or {"outcome": "cancelled"}'
    )


ROUTES = [Route("/api/sessions/{id}/permissions/{request}", permission, methods=["GET", "POST"])]
