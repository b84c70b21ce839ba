"""The ACP SDK's in-memory message transport, behind one module of ours.

A network connection binds the SDK's ``AgentSideConnection`` to its own message pump with a
linked pair of in-memory transports: what one end sends the other receives, as decoded
JSON-RPC messages. The SDK (0.12.1) has the pair only in a private module,
``acp._transport``, which any release may change; it is imported here and nowhere else, and
``tests/unit/test_sdk_transport.py`` pins what we rely on (order, a copy of each message,
EOF after close, a send after close refused, and the SDK's connection accepting the end).
"""

from __future__ import annotations

from typing import Any, Protocol

from acp._transport import memory_transport_pair


class MessageEnd(Protocol):
    """One end of the pair: messages in, messages out; ``receive`` gives None at EOF (the
    other end closed)."""

    async def send(self, message: dict[str, Any]) -> None: ...

    async def receive(self) -> dict[str, Any] | None: ...

    async def close(self) -> None: ...


def message_pair() -> tuple[Any, MessageEnd]:
    """(the end to hand to ``AgentSideConnection``, typed as the SDK wants it; our end)."""
    sdk_side, ours = memory_transport_pair()
    return sdk_side, ours
