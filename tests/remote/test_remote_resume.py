"""Resume without loss or repetition: a client that drops mid-turn comes back with its
position and gets exactly the rest (checked by positions); a server killed with -9 mid-turn
and started again serves the stored rest to a client that reloads with its position."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.support.remote_client import ListenServer, RpcClient, ws_client

pytestmark = pytest.mark.anyio


def _agent_chunks(client: RpcClient, sid: str) -> list[tuple[int, str]]:
    return [
        (u["_meta"]["acpctl"]["position"], u["update"]["content"]["text"])
        for u in client.updates(sid)
        if u["update"]["sessionUpdate"] == "agent_message_chunk"
    ]


async def _outcome(client: RpcClient, sid: str, key: str) -> dict[str, Any]:
    async with asyncio.timeout(60):
        while True:
            found: dict[str, Any] = await client.request(
                "_acpctl/outcome", {"sessionId": sid, "idempotencyKey": key}
            )
            if found.get("stopReason") or found.get("error"):
                return found
            await asyncio.sleep(0.1)


async def test_a_client_dropped_mid_turn_gets_exactly_the_rest_and_the_outcome(
    server: ListenServer, tmp_path: Path
) -> None:
    secret = server.secret
    key = "prompt-1"
    async with ws_client(server.ws_url, secret) as first:
        await first.initialize()
        sid = await first.new_session(str(tmp_path))
        turn = asyncio.create_task(first.prompt(sid, "#chunks=60 #delay=20 go", key=key))
        await first.wait_for(lambda: len(_agent_chunks(first, sid)) >= 10)
        await first.ws.close()  # the network drops: the turn runs on
        with pytest.raises(ConnectionError):
            await turn
    seen = _agent_chunks(first, sid)
    last = seen[-1][0]
    async with ws_client(server.ws_url, secret) as second:
        await second.initialize()
        answer = await second.load(sid, str(tmp_path), after=last)
        assert answer["_meta"]["acpctl"]["position"] >= last
        outcome = await _outcome(second, sid, key)
        assert outcome == {"found": True, "state": "completed", "stopReason": "end_turn"}
        await second.wait_for(lambda: len(seen) + len(_agent_chunks(second, sid)) >= 60)
        rest = _agent_chunks(second, sid)
        assert all(position > last for position, _ in rest)
        texts = [text for _, text in seen + rest]
        assert texts == [f"c{i} " for i in range(60)], "no gap, no repeat"
        # The idempotency key's outcome is what a repeated prompt answers too, without a rerun.
        again = await second.prompt(sid, "#chunks=60 #delay=20 go", key=key)
        assert again["stopReason"] == "end_turn"
        assert len(_agent_chunks(second, sid)) == len(rest)


async def test_a_server_killed_mid_turn_serves_the_rest_after_a_restart(
    server: ListenServer, tmp_path: Path
) -> None:
    secret = server.secret
    async with ws_client(server.ws_url, secret) as first:
        await first.initialize()
        sid = await first.new_session(str(tmp_path))
        turn = asyncio.create_task(first.prompt(sid, "#chunks=200 #delay=20 go", key="k"))
        await first.wait_for(lambda: len(_agent_chunks(first, sid)) >= 10)
        server.kill9()
        with pytest.raises(ConnectionError):
            await turn
    seen = _agent_chunks(first, sid)
    last = seen[-1][0]
    server.start()
    async with ws_client(server.ws_url, secret) as second:
        await second.initialize()
        await second.load(sid, str(tmp_path), after=last)
        outcome = await _outcome(second, sid, "k")
        # serve's sessions report a turn cut short by a crash; they never re-run it.
        assert outcome["state"] == "interrupted" and outcome["stopReason"] == "cancelled"
        rest = second.updates(sid)
        positions = [u["_meta"]["acpctl"]["position"] for u in rest]
        assert all(p > last for p in positions)
        assert positions == sorted(set(positions)) or len(positions) <= 1
        texts = [t for _, t in seen] + [t for _, t in _agent_chunks(second, sid)]
        chunk_texts = [t for t in texts if t.startswith("c")]
        assert chunk_texts == [f"c{i} " for i in range(len(chunk_texts))], "no gap, no repeat"
        assert any("interrupted" in str(u["update"]) for u in rest)
