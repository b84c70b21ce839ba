"""The one place control-plane errors become JSON-RPC errors (for ``acpctl serve``)."""

from __future__ import annotations

from acp import RequestError

from state_machines import (
    ControlPlaneError,
    IdempotencyConflict,
    LimitExceeded,
    SessionClosed,
    SessionNotFound,
)


def to_request_error(exc: ControlPlaneError) -> RequestError:
    """-32602 for what the client got wrong (unknown or closed session, a reused key, a
    limit); -32603 for failures on our side."""
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
    return RequestError.internal_error({"details": str(exc)})


def turn_failed(details: str) -> RequestError:
    """A prompt whose turn failed (the agent died or broke the protocol): -32603."""
    return RequestError.internal_error({"details": details})
