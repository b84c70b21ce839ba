"""JSON on the per-frame paths (the raw tap, serve's forwarding) through orjson.

A streaming turn parses every agent frame once and, behind ``acpctl serve``, writes every
update once more; with the standard library that was a tenth of the control plane's CPU per
turn. orjson reads integers beyond 64 bits as floats (losing digits), so text with a run of
19 or more digits (the shortest such integer) is parsed by the standard library instead:
exact, only slower, and rare.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_LONG_DIGITS = re.compile(rb"\d{19}")


def loads(data: bytes) -> Any:
    """Parse JSON text (``ValueError`` when it is not JSON)."""
    if _LONG_DIGITS.search(data) is not None:
        return json.loads(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)  # raises the standard library's error, with its message


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError: an integer beyond 64 bits, a subclass...
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
