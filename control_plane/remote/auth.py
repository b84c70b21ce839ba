"""Where a client puts its token. ``Authorization: Bearer <secret>`` everywhere; browsers,
which cannot set headers on a WebSocket, use the cookie ``acpctl_token`` or offer the
subprotocol ``acpctl.bearer.<secret>`` (next to ``acp``, which the server then picks). Never
a query parameter: URLs end up in access logs and browser history.

The cookie is taken only from the server's own pages: a browser sends it with any request
to this host, also one a page of another site makes (a cross-site WebSocket is not held to
CORS), so a request that carries an ``Origin`` other than this host's is not authenticated
by its cookie. Headers and subprotocols cannot be set by another site's page."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from starlette.responses import JSONResponse

from store.tokens import TokenRecord


class TokenHolder(Protocol):
    """What the token check needs of the server (``Hub``): its cached check of a secret."""

    @property
    def tokens(self) -> Callable[[str], TokenRecord | None]: ...


COOKIE = "acpctl_token"
SUBPROTOCOL_PREFIX = "acpctl.bearer."
ACP_SUBPROTOCOL = "acp"


def presented_secret(headers: Mapping[str, str], cookies: Mapping[str, str]) -> str | None:
    authorization = headers.get("authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    if cookies.get(COOKIE) and same_origin(headers):
        return cookies[COOKIE]
    for offered in offered_subprotocols(headers):
        if offered.startswith(SUBPROTOCOL_PREFIX):
            return offered[len(SUBPROTOCOL_PREFIX) :]
    return None


def same_origin(headers: Mapping[str, str]) -> bool:
    """No ``Origin`` (not a browser page), or one naming this very host and port."""
    origin = headers.get("origin")
    if origin is None:
        return True
    _, _, authority = origin.partition("://")
    return bool(authority) and authority.lower() == headers.get("host", "").lower()


def offered_subprotocols(headers: Mapping[str, str]) -> list[str]:
    raw = headers.get("sec-websocket-protocol", "")
    return [p.strip() for p in raw.split(",") if p.strip()]


def chosen_subprotocol(headers: Mapping[str, str]) -> str | None:
    """The subprotocol to accept: ``acp`` when offered; else the bearer one if that is all
    the client offered (a browser must get one of its own back)."""
    offered = offered_subprotocols(headers)
    if ACP_SUBPROTOCOL in offered:
        return ACP_SUBPROTOCOL
    return offered[0] if offered else None


def error_response(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def unauthorized() -> JSONResponse:
    return error_response(
        401, "a valid access token is required", **{"WWW-Authenticate": 'Bearer realm="acpctl"'}
    )


def token_of(hub: TokenHolder, headers: Any, cookies: Any) -> tuple[TokenRecord, str] | None:
    secret = presented_secret(headers, cookies)
    if secret is None:
        return None
    token = hub.tokens(secret)
    return None if token is None else (token, secret)
