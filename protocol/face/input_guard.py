"""Guarding the client side of ``acpctl serve``: what the SDK would mishandle is answered here.

The SDK skips a non-JSON line silently (no -32700), dies on a JSON value that is not an
object, and buffers a frame of any size. ``acpctl serve`` must answer each with the right
JSON-RPC error and keep serving, so stdin passes through this pump first: good frames go on
to the SDK's reader unchanged, bad ones get an error response written here.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from protocol import json_codec

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
DEFAULT_MAX_FRAME_BYTES = 8 * 1024 * 1024


def _error(code: int, message: str, request_id: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def check_frame(line: bytes, max_frame_bytes: int) -> bytes | None:
    """The error response for a bad frame, or None if the SDK may have it."""
    problem = frame_problem(line, max_frame_bytes)
    return None if problem is None else json.dumps(problem).encode() + b"\n"


def parse_frame(data: bytes, max_frame_bytes: int) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """A frame of the network front end: ``(message, {})`` when the SDK may have it, else
    ``(None, the JSON-RPC error response)``. Same rules as stdio (one frame, one message)."""
    problem = frame_problem(data, max_frame_bytes)
    if problem is not None:
        return None, problem
    return json_codec.loads(data), {}


def frame_problem(line: bytes, max_frame_bytes: int) -> dict[str, Any] | None:
    if len(line) > max_frame_bytes:
        return _error(INVALID_REQUEST, f"Invalid Request: frame over {max_frame_bytes} bytes")
    try:
        value = json_codec.loads(line)
    except ValueError:
        return _error(PARSE_ERROR, "Parse error: not valid JSON")
    if isinstance(value, list):
        return _error(INVALID_REQUEST, "Invalid Request: JSON-RPC batches are not supported")
    if not isinstance(value, dict):
        return _error(INVALID_REQUEST, "Invalid Request: a JSON-RPC message must be an object")
    if "method" not in value and "id" not in value:
        return _error(INVALID_REQUEST, "Invalid Request: neither method nor id")
    if "method" in value and not isinstance(value["method"], str):
        return _error(INVALID_REQUEST, "Invalid Request: method must be a string", value.get("id"))
    return None


async def guard_input(
    source: asyncio.StreamReader,
    sink: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> None:
    """Copy good lines from ``source`` to ``sink``; answer bad ones on ``writer``."""
    pending = bytearray()
    oversized = False
    try:
        while chunk := await source.read(65536):
            start = 0
            while (end := chunk.find(b"\n", start)) != -1:
                if oversized:
                    oversized = False  # the rest of the over-long frame ends here
                else:
                    pending += chunk[start:end]
                    _deliver(bytes(pending), sink, writer, max_frame_bytes)
                pending.clear()
                start = end + 1
            if not oversized:
                pending += chunk[start:]
                if len(pending) > max_frame_bytes:
                    error = _error(
                        INVALID_REQUEST, f"Invalid Request: frame over {max_frame_bytes} bytes"
                    )
                    writer.write(json.dumps(error).encode() + b"\n")
                    pending.clear()
                    oversized = True  # skip until the next newline
        if pending and not oversized:
            _deliver(bytes(pending), sink, writer, max_frame_bytes)
    finally:
        sink.feed_eof()


def _deliver(
    line: bytes, sink: asyncio.StreamReader, writer: asyncio.StreamWriter, limit: int
) -> None:
    if not line.strip():
        return
    problem = check_frame(line, limit)
    if problem is not None:
        writer.write(problem)
    else:
        sink.feed_data(line + b"\n")
