"""Access tokens of the network front end, as the store keeps them: a name, what the token
may do, and a SHA-256 of its secret (never the secret). The secret is random, so a plain
hash is enough: there is nothing to brute-force that a slow hash would protect."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum


class TokenAccess(StrEnum):
    CONTROL = "control"  # prompts, cancel, close, permission answers, new sessions
    WATCH = "watch"  # load, resume and list only: it sees sessions and changes nothing


class TokenSessions(StrEnum):
    ALL = "all"  # every session of the store
    OWN = "own"  # only the sessions this token created


@dataclass(frozen=True)
class TokenRecord:
    id: str
    name: str
    access: TokenAccess
    sessions: TokenSessions
    created_at: float
    revoked_at: float | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def secret_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
