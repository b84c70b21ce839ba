"""The one place control-plane errors become JSON-RPC errors (for ``acpctl serve``)."""

from __future__ import annotations

from typing import Any

from acp import RequestError

from state_machines import (
    BudgetExceeded,
    ControlPlaneError,
    IdempotencyConflict,
    LimitExceeded,
    SessionClosed,
    SessionNotFound,
)


def to_request_error(exc: ControlPlaneError) -> RequestError:
    """-32602 for what the client got wrong (unknown or closed session, a reused key, a
    limit); -32600 for a session a budget stopped; -32603 for failures on our side."""
    if isinstance(exc, SessionNotFound):
        return RequestError.invalid_params(
            {"sessionId": exc.session_id, "reason": "unknown session"}
        )
    if isinstance(exc, SessionClosed):
        return RequestError.invalid_params(
            {"sessionId": exc.session_id, "reason": "session is closed"}
        )
    if isinstance(exc, IdempotencyConflict):
        return RequestError.invalid_params({"idempotencyKey": exc.key, "reason": str(exc)})
    if isinstance(exc, LimitExceeded):
        return RequestError.invalid_params({"limit": exc.limit, "reason": str(exc)})
    if isinstance(exc, BudgetExceeded):
        # -32600: the request is well formed, but this session takes no more prompts.
        return RequestError.invalid_request(
            {
                "sessionId": exc.session_id,
                "reason": "budget exceeded",
                "budget": exc.budget,
                "limit": exc.limit,
                "used": exc.used,
                "details": str(exc),
            }
        )
    if isinstance(exc, ValueError):  # typed input errors (a fork point, an agent name)
        return RequestError.invalid_params({"reason": str(exc)})
    return RequestError.internal_error({"details": str(exc)})


def turn_failed(details: str) -> RequestError:
    """A prompt whose turn failed (the agent died or broke the protocol): -32603."""
    return RequestError.internal_error({"details": details})


def agent_refused(payload: dict[str, Any]) -> RequestError:
    """The backend agent's own error (an ``agentError`` in a stored event or outcome), passed
    to the client unchanged: -32000 "Authentication required" stays -32000 with its data,
    so an editor can start its login flow. Without one, -32603 with the stored reason."""
    agent_error = payload.get("agentError")
    if isinstance(agent_error, dict) and isinstance(agent_error.get("code"), int):
        return RequestError(
            agent_error["code"], str(agent_error.get("message", "")), agent_error.get("data")
        )
    return RequestError.internal_error({"details": str(payload.get("error", "agent failed"))})
