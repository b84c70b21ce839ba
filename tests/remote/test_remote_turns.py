"""``serve --listen`` end to end over real sockets: a turn over each profile, every update
carrying its position, and the prompt's answer after its updates."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.remote_client import ListenServer, http_client, ws_client

pytestmark = pytest.mark.anyio


async def test_a_turn_over_websocket_streams_every_update_with_its_position(
    server: ListenServer, tmp_path: Path
) -> None:
    async with ws_client(server.ws_url, server.secret) as client:
        init = await client.initialize()
        assert init["agentCapabilities"]["loadSession"] is True
        sid = await client.new_session(str(tmp_path))
        answer = await client.prompt(sid, "#chunks=20 hello")
        assert answer["stopReason"] == "end_turn"
        chunks = [
            u for u in client.updates(sid) if u["update"]["sessionUpdate"] == "agent_message_chunk"
        ]
        assert len(chunks) == 20
        positions = client.positions(sid)
        assert positions == sorted(positions) and len(set(positions)) == len(positions)


async def test_a_turn_over_streamable_http_uses_the_session_stream(
    server: ListenServer, tmp_path: Path
) -> None:
    async with http_client(server.url, server.secret) as client:
        await client.initialize()
        assert client.connection_id
        sid = await client.new_session(str(tmp_path))
        await client.open_session_stream(sid)
        answer = await client.prompt(sid, "#chunks=10 hi")
        assert answer["stopReason"] == "end_turn"
        assert all(status in (200, 202) for status in client.statuses)
        chunks = [
            u for u in client.updates(sid) if u["update"]["sessionUpdate"] == "agent_message_chunk"
        ]
        assert len(chunks) == 10
        positions = client.positions(sid)
        assert positions == sorted(positions) and len(set(positions)) == len(positions)
