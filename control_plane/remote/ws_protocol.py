"""uvicorn's WebSocket protocol (the sans-I/O one over the ``websockets`` library) with one
ASGI extension: ``{"type": "acpctl.send_frames", "frames": [bytes, ...]}`` sends several text
frames (UTF-8 JSON, already encoded) with one write to the socket.

Why: a turn's burst of updates is one commit, and ASGI sends one frame per message; per
frame that is a text decode and re-encode, the framing, and a ``send`` system call. Measured
(``bench/remote_overhead.py``): about 12 microseconds of the server's CPU per update, the
whole difference to stdio serve, which writes a burst as one block. The server announces the
extension in the scope (``extensions["acpctl.send_frames"]``); the handler falls back to one
``websocket.send`` per frame without it (another ASGI server).

The frames of a burst are framed here (RFC 6455 section 5.2: FIN, opcode text, the length;
a server's frames are not masked, and compression is off), not by the ``websockets``
protocol object frame by frame: its per-frame Python was a third of what was left. The
protocol object keeps no state about data frames it sends, only whether the connection is
open, which is checked first; everything else (handshake, pings, close) stays its job."""

from __future__ import annotations

import struct
from typing import Any

from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

EXTENSION = "acpctl.send_frames"


class FramesWebSocketProtocol(WebSocketsSansIOProtocol):
    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        extensions = getattr(self, "scope", {}).get("extensions")
        if isinstance(extensions, dict):
            extensions[EXTENSION] = {}

    async def send(self, message: Any) -> None:
        if message.get("type") != EXTENSION:
            await super().send(message)
            return
        await self.writable.wait()
        if (
            self.disconnected
            or self.close_sent
            or not self.handshake_complete
            or self.conn.state is not State.OPEN
        ):
            raise ClientDisconnected()
        parts: list[bytes] = []
        for payload in message["frames"]:
            parts.append(text_frame_header(len(payload)))
            parts.append(payload)
        self.transport.write(b"".join(parts))


def text_frame_header(length: int) -> bytes:
    """The header of one unfragmented, unmasked text frame of ``length`` payload bytes."""
    if length < 126:
        return bytes((0x81, length))
    if length < 65536:
        return struct.pack("!BBH", 0x81, 126, length)
    return struct.pack("!BBQ", 0x81, 127, length)
