"""What ``control_plane/remote/sdk_transport.py`` relies on in the ACP SDK's private
in-memory transport pair: a release that changes any of it fails here, not in a connection."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from acp.agent.connection import AgentSideConnection
from acp.schema import InitializeResponse

from control_plane.remote.sdk_transport import message_pair


def test_messages_arrive_in_order_each_a_copy_then_eof_after_close() -> None:
    async def run() -> None:
        sdk_side, ours = message_pair()
        sent = [{"jsonrpc": "2.0", "method": "m", "params": {"n": n}} for n in range(3)]
        for message in sent:
            await ours.send(message)
        got = [await sdk_side.receive() for _ in sent]
        assert got == sent
        assert all(g is not s for g, s in zip(got, sent, strict=True))  # a copy
        await sdk_side.send({"jsonrpc": "2.0", "id": 1, "result": {}})
        assert await ours.receive() == {"jsonrpc": "2.0", "id": 1, "result": {}}
        await ours.close()
        assert await sdk_side.receive() is None  # EOF for the other end
        with pytest.raises(ConnectionError):
            await ours.send({"jsonrpc": "2.0", "method": "late"})
        await ours.close()  # twice: no error

    asyncio.run(run())


class _Agent:
    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(protocol_version=protocol_version)


def test_the_sdks_agent_connection_takes_its_end_and_answers_through_ours() -> None:
    async def run() -> None:
        sdk_side, ours = message_pair()
        connection = AgentSideConnection(_Agent(), sdk_side, listening=True)  # type: ignore[arg-type]
        try:
            request = {"jsonrpc": "2.0", "id": 7, "method": "initialize"}
            await ours.send({**request, "params": {"protocolVersion": 1}})
            answer = await asyncio.wait_for(ours.receive(), 10)
            assert answer is not None and answer["id"] == 7
            assert answer["result"]["protocolVersion"] == 1
        finally:
            await ours.close()
            await connection.close()

    asyncio.run(run())
