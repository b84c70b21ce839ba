"""The console's read-only JSON API (``/api/...``, any valid token; an ``own`` token sees only
its sessions). Sessions stream over ACP on the WebSocket; lists, a session's facts, the
store's levels and batch progress come from here.

- ``GET /api/me``: the token's name and scopes (the console turns read-only for ``watch``).
- ``GET /api/sessions?state=S&q=TEXT&limit=N``: newest first; ``q`` matches the id, the spawn
  key or the cwd.
- ``GET /api/sessions/{id}``: the session, its commands' counts, running turn, usage, and its
  children with each one's last outcome.
- ``GET /api/sessions/{id}/transcript``: the JSONL transcript v3 (a download).
- ``GET /api/status``: the store's levels, this server's connections, and batch progress.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from control_plane.remote.access import may_see
from control_plane.remote.auth import error_response, token_of, unauthorized
from control_plane.remote.hub import Hub
from state_machines import COMMAND_MACHINE, CommandState, SessionNotFound, SessionState
from store import CommandRecord, SessionRecord
from store.tokens import TokenRecord

LIST_LIMIT = 200
SCAN_LIMIT = 5_000  # sessions looked at for a list, a search or batch progress


def _token(request: Request) -> TokenRecord | None:
    found = token_of(request.app.state.hub, request.headers, request.cookies)
    if found is None:
        return None
    request.scope.setdefault("state", {})["token_name"] = found[0].name  # the access log's
    return found[0]


def _visible(token: TokenRecord, session: SessionRecord) -> bool:
    return may_see(token.id, token.sessions, session.metadata)


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


def _list(hub: Hub, token: TokenRecord, state: str | None, q: str, limit: int) -> list[Any]:
    chosen = SessionState(state) if state else None
    sessions = [s for s in hub.cp.list_sessions(chosen, SCAN_LIMIT) if _visible(token, s)]
    if q:
        sessions = [s for s in sessions if q in s.id or q in (s.spawn_key or "") or q in s.cwd]
    sessions.sort(key=lambda s: s.updated_at, reverse=True)
    out = []
    for session in sessions[:limit]:
        entry = _session_json(session, hub.cp.commands(session.id))
        usage = hub.cp.usage(session.id)
        entry["usage"] = {"tokens": usage.total_tokens, "costUsd": usage.cost_usd}
        out.append(entry)
    return out


async def me(request: Request) -> Response:
    token = _token(request)
    if token is None:
        return unauthorized()
    return JSONResponse(
        {"name": token.name, "access": token.access.value, "sessions": token.sessions.value}
    )


async def sessions(request: Request) -> Response:
    token = _token(request)
    if token is None:
        return unauthorized()
    state = request.query_params.get("state") or None
    if state is not None and state not in {s.value for s in SessionState}:
        return error_response(400, f"no session state {state!r}")
    limit_text = request.query_params.get("limit", str(LIST_LIMIT))
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= LIST_LIMIT:
        return error_response(400, f"limit is 1 to {LIST_LIMIT}")
    q = request.query_params.get("q", "").strip()
    hub: Hub = request.app.state.hub
    listed = await asyncio.to_thread(_list, hub, token, state, q, int(limit_text))
    return JSONResponse({"sessions": listed})


def _details(hub: Hub, token: TokenRecord, session_id: str) -> dict[str, Any] | None:
    session = hub.cp.get(session_id)
    if not _visible(token, session):
        return None
    entry = _session_json(session, hub.cp.commands(session_id))
    usage = hub.cp.usage(session_id)
    tree = hub.cp.usage(session_id, tree=True)
    entry["usage"] = {"tokens": usage.total_tokens, "costUsd": usage.cost_usd}
    entry["treeUsage"] = {"tokens": tree.total_tokens, "costUsd": tree.cost_usd}
    entry["children"] = [
        _session_json(child, hub.cp.commands(child.id)) for child in hub.cp.children(session_id)
    ]
    return entry


async def session(request: Request) -> Response:
    token = _token(request)
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
    if not _visible(token, hub.cp.get(session_id)):
        return None
    with tempfile.TemporaryDirectory(prefix="acpctl-export-") as tmp:
        path = hub.cp.export_jsonl(session_id, Path(tmp) / "transcript.jsonl")
        return path.read_bytes()


async def transcript(request: Request) -> Response:
    token = _token(request)
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
        if batch is None or not _visible(token, s):
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
    token = _token(request)
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
