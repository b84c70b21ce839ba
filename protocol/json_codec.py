"""JSON on the per-frame paths (the raw tap, serve's forwarding) through orjson.

A streaming turn parses every agent frame once and, behind ``acpctl serve``, writes every
update once more; with the standard library that was a tenth of the control plane's CPU per
turn. orjson reads integers beyond 64 bits as floats (losing digits), so text with a run of
19 or more digits (the shortest such integer) is parsed by the standard library instead:
exact, only slower, and rare.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# A run of 19 digits, found in C: every digit becomes "0", then one substring search. A
# regular expression (``\d{19}``) cost 6 µs per frame, three times orjson's whole parse.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_RUN = b"0" * 19


def has_long_digit_run(data: bytes) -> bool:
    """Whether ``data`` holds 19 or more digits in a row (an integer orjson cannot keep)."""
    return data.translate(_DIGITS_AS_ZERO).find(_RUN) != -1


def loads(data: bytes) -> Any:
    """Parse JSON text (``ValueError`` when it is not JSON, or nested too deeply: the
    standard library raises ``RecursionError`` there, which no caller expects from bad
    input, and a line of 1,100 ``[`` is 2.2 KB)."""
    try:
        if has_long_digit_run(data):
            return json.loads(data)
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            return json.loads(data)  # raises the standard library's error, with its message
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError: an integer beyond 64 bits, a subclass...
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
