"""Access tokens for ``acpctl serve --listen``: issued with a random secret that is shown
once, kept in the store only as a digest, revocable at any time (the server sees a revoked
token refused within ``TokenCheck.ttl_s``, no restart).

A token's secret looks like ``acpctl_<43 url-safe characters>``: the prefix lets secret
scanners and the log redaction recognise one."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable

from store import Store, queries
from store.ops import tokens as token_ops
from store.tokens import TokenAccess, TokenRecord, TokenSessions, secret_digest

SECRET_PREFIX = "acpctl_"


def create_token(
    store: Store,
    name: str,
    access: TokenAccess = TokenAccess.CONTROL,
    sessions: TokenSessions = TokenSessions.ALL,
) -> tuple[TokenRecord, str]:
    """A new token and its secret (the only time the secret exists outside its holder)."""
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    digest = secret_digest(secret)
    record = store.write(lambda ctx: token_ops.create_token(ctx, name, digest, access, sessions))
    return record, secret


def revoke_token(store: Store, name_or_id: str) -> list[TokenRecord]:
    return store.write(lambda ctx: token_ops.revoke_token(ctx, name_or_id))


def list_tokens(store: Store) -> list[TokenRecord]:
    return store.read(queries.list_tokens)


class TokenCheck:
    """Which token a presented secret is, from the store, remembered for ``ttl_s`` so that a
    stream of requests costs one read per second, not one per request. A revocation takes
    effect within ``ttl_s``. Thread-safe."""

    def __init__(self, lookup: Callable[[str], TokenRecord | None], ttl_s: float = 1.0) -> None:
        self._lookup = lookup
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, TokenRecord | None]] = {}

    def __call__(self, secret: str) -> TokenRecord | None:
        if not secret.startswith(SECRET_PREFIX):
            return None
        digest = secret_digest(secret)
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get(digest)
        if seen is not None and now - seen[0] < self.ttl_s:
            return seen[1]
        found = self._lookup(digest)
        with self._lock:
            if len(self._seen) > 10_000:  # garbage secrets must not grow it without bound
                self._seen.clear()
            self._seen[digest] = (now, found)
        return found
