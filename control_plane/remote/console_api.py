"""The console's read-only JSON API (``/api/...``, any valid token; an ``own`` token sees only
its sessions). Sessions stream over ACP on the WebSocket; lists, a session's facts, the
store's levels and batch progress come from here.

- ``GET /api/me``: the token's name and scopes (the console turns read-only for ``watch``).
- ``GET /api/sessions?state=S[,S2]&q=TEXT&limit=N&cursor=C``: newest updated first, a page at a
  time (``nextCursor``: the next page's ``cursor``, null at the end; no cap). With ``q``: the
  sessions whose prompts, answers or tool titles match it (the store's full-text search),
  newest match first, each with its ``match`` snippet; a session whose id or spawn key is
  ``q`` comes first.
- ``GET /api/sessions/{id}``: the session, its commands' counts, running turn, usage, and its
  subagent tree: its children with each one's last outcome and its own children.
- ``GET /api/sessions/{id}/transcript``: the JSONL transcript v3 (a download).
- ``GET /api/status``: the store's levels, this server's connections, and batch progress.

A session's workspace and turn diffs are in ``console_workspace.py``, a permission request
as recorded in ``console_permissions.py``; both answer through ``answer`` here.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from control_plane.remote.access import may_see
from control_plane.remote.auth import error_response, token_of, unauthorized
from control_plane.remote.hub import Hub
from state_machines import (
    COMMAND_MACHINE,
    CommandState,
    ControlPlaneError,
    SessionNotFound,
    SessionState,
)
from store import CommandRecord, SessionRecord
from store.queries.search import SearchFilters
from store.search_query import SearchQueryError
from store.tokens import TokenRecord

LIST_LIMIT = 200
SCAN_LIMIT = 5_000  # sessions looked at for batch progress (the list pages without a cap)


def request_token(request: Request) -> TokenRecord | None:
    found = token_of(request.app.state.hub, request.headers, request.cookies)
    if found is None:
        return None
    request.scope.setdefault("state", {})["token_name"] = found[0].name  # the access log's
    return found[0]


def visible(token: TokenRecord, session: SessionRecord) -> bool:
    return may_see(token.id, token.sessions, session.metadata)


class Refused(ControlPlaneError):
    """An answer other than the view asked for: its HTTP status and reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def seen(hub: Hub, token: TokenRecord, session_id: str) -> SessionRecord:
    """The session, if the token may see it (``SessionNotFound``, else ``Refused`` 403)."""
    session = hub.cp.get(session_id)
    if not visible(token, session):
        raise Refused(403, "the token may only see the sessions it created")
    return session


async def answer(request: Request, read: Callable[..., Any], *args: Any) -> Response:
    """``read(hub, token, session id, *args)`` off the loop, as JSON; 401 without a valid
    token, 404 for an unknown session, ``Refused``'s status and reason."""
    token = request_token(request)
    if token is None:
        return unauthorized()
    hub: Hub = request.app.state.hub
    try:
        found = await asyncio.to_thread(read, hub, token, request.path_params["id"], *args)
    except SessionNotFound:
        return error_response(404, "no such session")
    except Refused as exc:
        return error_response(exc.status, str(exc))
    return JSONResponse(found)


def _session_json(session: SessionRecord, commands: list[CommandRecord]) -> dict[str, Any]:
    states = Counter(c.state.value for c in commands)
    running = next((c for c in commands if c.state is CommandState.RUNNING), None)
    last = max(
        (c for c in commands if c.state in COMMAND_MACHINE.final),
        key=lambda c: c.seq,
        default=None,
    )
    return {
        "id": session.id,
        "key": session.spawn_key,
        "state": session.state.value,
        "agent": session.agent.name or " ".join(session.agent.command),
        "cwd": session.cwd,
        "owner": session.owner,
        "parentId": session.parent_id,
        "queueMode": session.queue_mode,
        "queued": states.get(CommandState.QUEUED.value, 0),
        "runningTurn": None if running is None else running.id,
        "lastOutcome": None
        if last is None
        else {"state": last.state.value, "stopReason": (last.result or {}).get("stopReason")},
        "updatedAt": session.updated_at.isoformat(),
        "createdAt": session.created_at.isoformat(),
        "batch": session.metadata.get("batch"),
        "title": session.metadata.get("title"),
        "lastError": session.last_error,
    }


# A page is filled from at most this many store pages: an ``own`` token that sees few of
# the sessions gets a short page and a cursor rather than a scan of the whole store.
MAX_SCANNED_PAGES = 10


def _entry(hub: Hub, session: SessionRecord) -> dict[str, Any]:
    entry = _session_json(session, hub.cp.commands(session.id))
    usage = hub.cp.usage(session.id)
    entry["usage"] = {"tokens": usage.total_tokens, "costUsd": usage.cost_usd}
    return entry


def _list(
    hub: Hub,
    token: TokenRecord,
    states: tuple[SessionState, ...],
    before: tuple[float, str] | None,
    limit: int,
) -> tuple[list[Any], str | None]:
    """Newest updated first, after the cursor ``before`` (server-side paging, no cap)."""
    out: list[Any] = []
    for _ in range(MAX_SCANNED_PAGES):
        page, following = hub.cp.sessions_page(states, before, limit - len(out))
        out += [_entry(hub, s) for s in page if visible(token, s)]
        if following is None:
            return out, None
        before = following
        if len(out) == limit:
            break
    return out, _encode_list_cursor(before)


def _search(
    hub: Hub,
    token: TokenRecord,
    states: tuple[SessionState, ...],
    q: str,
    before: int | None,
    limit: int,
) -> tuple[list[Any], str | None]:
    """Sessions whose prompts, answers or tool titles match ``q``, newest match first; on
    the first page, a session whose id or spawn key is ``q`` comes first."""
    out: list[Any] = []
    if before is None:
        exact = _exact(hub, q)
        if exact is not None and visible(token, exact) and (not states or exact.state in states):
            out.append(_entry(hub, exact))
    for _ in range(MAX_SCANNED_PAGES):
        hits = hub.cp.search(q, SearchFilters(states=states, before=before), limit)
        for hit in hits:
            before = hit.doc_id
            if visible(token, hit.session) and all(e["id"] != hit.session.id for e in out):
                entry = _entry(hub, hit.session)
                entry["match"] = {
                    "role": hit.role,
                    "at": hit.at.isoformat(),
                    "snippet": hit.snippet,
                }
                out.append(entry)
                if len(out) >= limit:
                    return out, f"d{before}"
        if len(hits) < limit:
            return out, None
    return out, None if before is None else f"d{before}"


def _exact(hub: Hub, q: str) -> SessionRecord | None:
    try:
        return hub.cp.get(q)
    except SessionNotFound:
        return hub.cp.session_by_key(q)


def _encode_list_cursor(before: tuple[float, str] | None) -> str | None:
    if before is None:
        return None
    return f"u{before[0]!r}~{before[1]}"


def _list_cursor(cursor: str | None) -> tuple[float, str] | None:
    if cursor is None:
        return None
    stamp, sep, session_id = cursor[1:].partition("~")
    try:
        if cursor[0] != "u" or not sep:
            raise ValueError(cursor)
        return float(stamp), session_id
    except (ValueError, IndexError):
        raise ValueError(f"not a list cursor: {cursor!r}") from None


def _search_cursor(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    if cursor[:1] != "d" or not cursor[1:].isdigit():
        raise ValueError(f"not a search cursor: {cursor!r}")
    return int(cursor[1:])


async def me(request: Request) -> Response:
    token = request_token(request)
    if token is None:
        return unauthorized()
    return JSONResponse(
        {"name": token.name, "access": token.access.value, "sessions": token.sessions.value}
    )


async def sessions(request: Request) -> Response:
    token = request_token(request)
    if token is None:
        return unauthorized()
    names = [n for n in request.query_params.get("state", "").split(",") if n]
    unknown = [n for n in names if n not in {s.value for s in SessionState}]
    if unknown:
        return error_response(400, f"no session state {unknown[0]!r}")
    states = tuple(SessionState(n) for n in names)
    limit_text = request.query_params.get("limit", str(LIST_LIMIT))
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= LIST_LIMIT:
        return error_response(400, f"limit is 1 to {LIST_LIMIT}")
    q = request.query_params.get("q", "").strip()
    cursor = request.query_params.get("cursor") or None
    hub: Hub = request.app.state.hub
    limit = int(limit_text)
    try:  # the cursor alone: a ValueError from the reads below is no bad cursor
        after = _search_cursor(cursor) if q else None
        since = None if q else _list_cursor(cursor)
    except ValueError:
        return error_response(400, "a cursor this server did not hand out")
    try:
        if q:
            found = await asyncio.to_thread(_search, hub, token, states, q, after, limit)
        else:
            found = await asyncio.to_thread(_list, hub, token, states, since, limit)
    except SearchQueryError as exc:
        return error_response(400, str(exc))
    listed, next_cursor = found
    return JSONResponse({"sessions": listed, "nextCursor": next_cursor})


def _details(hub: Hub, token: TokenRecord, session_id: str) -> dict[str, Any] | None:
    session = hub.cp.get(session_id)
    if not visible(token, session):
        return None
    entry = _session_json(session, hub.cp.commands(session_id))
    usage = hub.cp.usage(session_id)
    tree = hub.cp.usage(session_id, tree=True)
    entry["usage"] = {"tokens": usage.total_tokens, "costUsd": usage.cost_usd}
    entry["treeUsage"] = {"tokens": tree.total_tokens, "costUsd": tree.cost_usd}
    entry["hasWorkspace"] = session.metadata.get("workspace") is not None
    budget = [TREE_LIMIT]
    entry["children"] = _subtree(hub, session_id, budget)
    entry["treeTruncated"] = budget[0] < 0
    return entry


# The subagent tree shown under a session: at most this many sessions below it.
TREE_LIMIT = 200


def _subtree(hub: Hub, session_id: str, budget: list[int]) -> list[dict[str, Any]]:
    """The session's children, each with its own ``children``, depth first; ``budget[0]``
    counts down the sessions still to show (negative once some were left out)."""
    out: list[dict[str, Any]] = []
    for child in hub.cp.children(session_id):
        budget[0] -= 1
        if budget[0] < 0:
            break
        node = _session_json(child, hub.cp.commands(child.id))
        node["children"] = _subtree(hub, child.id, budget)
        out.append(node)
    return out


async def session(request: Request) -> Response:
    token = request_token(request)
    if token is None:
        return unauthorized()
    hub: Hub = request.app.state.hub
    try:
        found = await asyncio.to_thread(_details, hub, token, request.path_params["id"])
    except SessionNotFound:
        return error_response(404, "no such session")
    if found is None:
        return error_response(403, "the token may only see the sessions it created")
    return JSONResponse(found)


def _export(hub: Hub, token: TokenRecord, session_id: str) -> bytes | None:
    if not visible(token, hub.cp.get(session_id)):
        return None
    with tempfile.TemporaryDirectory(prefix="acpctl-export-") as tmp:
        path = hub.cp.export_jsonl(session_id, Path(tmp) / "transcript.jsonl")
        return path.read_bytes()


async def transcript(request: Request) -> Response:
    token = request_token(request)
    if token is None:
        return unauthorized()
    hub: Hub = request.app.state.hub
    session_id = request.path_params["id"]
    try:
        body = await asyncio.to_thread(_export, hub, token, session_id)
    except SessionNotFound:
        return error_response(404, "no such session")
    if body is None:
        return error_response(403, "the token may only see the sessions it created")
    return Response(
        body,
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{session_id}.jsonl"'},
    )


def _status(hub: Hub, token: TokenRecord) -> dict[str, Any]:
    levels = hub.cp.levels()
    batches: dict[str, Counter[str]] = {}
    for s in hub.cp.list_sessions(None, SCAN_LIMIT):
        batch = s.metadata.get("batch")
        if batch is None or not visible(token, s):
            continue
        commands = hub.cp.commands(s.id)
        last = max(commands, key=lambda c: c.seq, default=None)
        word = (
            "queued"
            if last is None
            else {
                CommandState.COMPLETED: "done",
                CommandState.RUNNING: "running",
                CommandState.QUEUED: "queued",
            }.get(last.state, "failed")
        )
        batches.setdefault(str(batch), Counter())[word] += 1
    store = levels.store
    return {
        "store": {
            "path": hub.cp.store_path,
            "sessionsByState": dict(store.sessions_by_state),
            "queuedCommands": store.queued_commands,
            "runningCommands": store.running_commands,
        },
        "server": {
            "runningTurns": levels.running_turns,
            "waitingTurns": levels.waiting_turns,
            "liveSessions": levels.live_sessions,
            "connections": len(hub.connections),
            "draining": hub.draining,
        },
        "batches": [{"id": batch, **dict(counts)} for batch, counts in sorted(batches.items())],
        "nodes": hub.cp.nodes(),
    }


async def status(request: Request) -> Response:
    token = request_token(request)
    if token is None:
        return unauthorized()
    return JSONResponse(await asyncio.to_thread(_status, request.app.state.hub, token))


ROUTES = [
    Route("/api/me", me),
    Route("/api/sessions", sessions),
    Route("/api/sessions/{id}", session),
    Route("/api/sessions/{id}/transcript", transcript),
    Route("/api/status", status),
]
