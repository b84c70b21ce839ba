"""What a token may send: watch-only tokens read (load, resume, list, outcomes) and change
nothing; ``own`` tokens reach only the sessions they created. A refused request is answered
with a JSON-RPC error (-32003) and reaches nothing that writes; a refused notification
(``session/cancel``) is dropped."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

from control_plane.api import ControlPlane
from state_machines import SessionNotFound
from store.tokens import TokenAccess, TokenRecord, TokenSessions

FORBIDDEN = -32003  # in the JSON-RPC server-error range; ACP defines no code for it

# What a watch-only token may call: nothing here enqueues, cancels or answers anything.
WATCH_METHODS = frozenset(
    {"initialize", "session/load", "session/resume", "session/list", "_acpctl/outcome"}
)


class Caller(Protocol):
    """Who sends (a connection): its token, the sessions it was let into, the control
    plane to look a session's creator up in."""

    @property
    def token(self) -> TokenRecord: ...

    @property
    def allowed_sessions(self) -> set[str]: ...

    @property
    def cp(self) -> ControlPlane: ...


@dataclass(frozen=True)
class Denied:
    response: dict[str, Any]  # the JSON-RPC error response


def _denied(message: dict[str, Any], reason: str) -> Denied:
    return Denied(
        {
            "jsonrpc": "2.0",
            "id": message.get("id"),
            "error": {"code": FORBIDDEN, "message": f"Forbidden: {reason}"},
        },
    )


async def check_access(conn: Caller, message: dict[str, Any]) -> Denied | None:
    token = conn.token
    method = message.get("method")
    if token.access is TokenAccess.WATCH and method not in WATCH_METHODS:
        return _denied(message, f"token {token.name!r} is watch-only; {method} changes things")
    params = message.get("params")
    session_id = params.get("sessionId") if isinstance(params, dict) else None
    if not isinstance(session_id, str) or token.sessions is TokenSessions.ALL:
        return None
    if session_id in conn.allowed_sessions:
        return None
    try:
        session = await asyncio.to_thread(conn.cp.get, session_id)
    except SessionNotFound:
        return None  # the agent answers "not found" itself
    if session.metadata.get("createdByToken") != token.id:
        return _denied(message, f"token {token.name!r} may only use the sessions it created")
    conn.allowed_sessions.add(session_id)
    return None


def may_see(token_id: str, sessions: TokenSessions, metadata: dict[str, Any]) -> bool:
    return sessions is TokenSessions.ALL or metadata.get("createdByToken") == token_id
