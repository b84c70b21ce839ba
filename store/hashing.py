"""Request hashes for idempotency: SHA-256 of the canonical JSON of kind + payload."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_hash(kind: str, payload: Any) -> str:
    return hashlib.sha256(canonical_json({"kind": kind, "payload": payload}).encode()).hexdigest()
