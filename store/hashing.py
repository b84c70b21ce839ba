"""Request hashes for idempotency: SHA-256 of the canonical JSON of kind + payload."""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

# One encoder, built once: ``json.dumps`` with arguments builds a new one per call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    return _CANONICAL.encode(value)


def request_hash(kind: str, payload: Any) -> str:
    return canonical_payload(kind, payload)[1]


def canonical_payload(kind: str, payload: Any) -> tuple[str, str]:
    """``(canonical JSON of payload, request_hash(kind, payload))`` with one encoding of the
    payload: the canonical form of ``{"kind": k, "payload": p}`` is the two keys in sorted
    order around the canonical form of ``p``; tests pin that this is the SHA-256 of the
    canonical JSON of the whole envelope, the hash stored for every request so far."""
    text = _CANONICAL.encode(payload)
    envelope = '{"kind":' + _encoded_kind(kind) + ',"payload":' + text + "}"
    return text, hashlib.sha256(envelope.encode()).hexdigest()


@functools.lru_cache(maxsize=64)
def _encoded_kind(kind: str) -> str:
    """A command kind's JSON string (a handful of kinds: encoded once each)."""
    return _CANONICAL.encode(kind)


def command_hash(command: tuple[str, ...] | list[str]) -> str:
    """The key of an agent command line (the capability cache)."""
    return hashlib.sha256(_CANONICAL.encode(list(command)).encode()).hexdigest()
