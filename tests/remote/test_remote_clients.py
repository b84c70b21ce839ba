"""Several clients on one session, permission requests answered from any of them, and a
client that does not read cut off without harm to the others."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from websockets.client import ClientProtocol
from websockets.http11 import Response
from websockets.uri import parse_uri

from tests.support.direct_sql import query
from tests.support.remote_client import (
    ListenServer,
    RpcClient,
    make_token,
    running_server,
    ws_client,
)

pytestmark = pytest.mark.anyio


async def test_two_clients_see_every_update_once_in_order(
    server: ListenServer, tmp_path: Path
) -> None:
    secret = server.secret
    async with ws_client(server.ws_url, secret) as a, ws_client(server.ws_url, secret) as b:
        await a.initialize()
        await b.initialize()
        sid = await a.new_session(str(tmp_path))
        loaded_at = (await b.load(sid, str(tmp_path)))["_meta"]["acpctl"]["position"]
        await a.prompt(sid, "#chunks=30 #delay=5 first")
        # B prompts too: A sees B's turn, B sees its own and A's prompt as user messages.
        await b.prompt(sid, "#chunks=5 second")
        await a.wait_for(lambda: a.positions(sid)[-1:] == b.positions(sid)[-1:])
        a_live, b_live = _live(a, sid, loaded_at), _live(b, sid, loaded_at)
        for seen in (a_live, b_live):
            positions = [p for p, u in seen if u["sessionUpdate"] != "user_message_chunk"]
            assert positions == sorted(set(positions)), "in order, no repeats"
        # The agent's updates: the same ones, in the same order, for both.
        assert _agent_updates(a_live) == _agent_updates(b_live)
        assert len(_agent_updates(a_live)) >= 35
        users_a = [u for _, u in a_live if u["sessionUpdate"] == "user_message_chunk"]
        users_b = [u for _, u in b_live if u["sessionUpdate"] == "user_message_chunk"]
        # Each sees the other's prompt, never its own echoed.
        assert [u["content"]["text"] for u in users_a] == ["#chunks=5 second"]
        assert [u["content"]["text"] for u in users_b] == ["#chunks=30 #delay=5 first"]


Seen = list[tuple[int, dict[str, Any]]]


def _live(client: RpcClient, sid: str, after: int) -> Seen:
    pairs = zip(client.positions(sid), client.updates(sid), strict=True)
    return [(p, u["update"]) for p, u in pairs if p > after]


def _agent_updates(seen: Seen) -> Seen:
    return [(p, u) for p, u in seen if u["sessionUpdate"] != "user_message_chunk"]


async def test_a_permission_request_goes_to_every_client_and_the_first_answer_wins(
    server: ListenServer, tmp_path: Path
) -> None:
    secret = server.secret
    async with (
        ws_client(server.ws_url, secret, permission="ignore") as a,
        ws_client(server.ws_url, secret, permission="ignore") as b,
    ):
        await a.initialize()
        await b.initialize()
        sid = await a.new_session(str(tmp_path))
        await b.load(sid, str(tmp_path))
        turn = asyncio.create_task(a.prompt(sid, "#permission #tool go"))
        await a.wait_for(lambda: bool(a.permission_requests))
        await b.wait_for(lambda: bool(b.permission_requests))
        request = b.permission_requests[0]
        assert request["id"] == a.permission_requests[0]["id"]
        await b.answer_permission(request, "reject")
        assert (await turn)["stopReason"] == "end_turn"
        assert "permission: rejected" in a.text(sid) or "reject" in a.text(sid)
        await a.wait_for(lambda: request["id"] in a.withdrawn)
        assert request["id"] not in b.withdrawn
        # A late answer from A changes nothing (the turn is over, already answered).
        await a.answer_permission(a.permission_requests[0], "allow")


async def test_a_pending_permission_request_waits_for_a_client_to_come_back(
    server: ListenServer, tmp_path: Path
) -> None:
    secret = server.secret
    async with ws_client(server.ws_url, secret, permission="ignore") as a:
        await a.initialize()
        sid = await a.new_session(str(tmp_path))
        key = "turn-with-a-question"
        turn = asyncio.create_task(a.prompt(sid, "#permission #tool go", key=key))
        await a.wait_for(lambda: bool(a.permission_requests))
        await a.ws.close()
        with pytest.raises(Exception):  # noqa: B017  # the connection is gone
            await turn
    await asyncio.sleep(0.5)  # nobody attached: the request waits in the server
    async with ws_client(server.ws_url, secret, permission="allow") as b:
        await b.initialize()
        await b.load(sid, str(tmp_path))
        await b.wait_for(lambda: bool(b.permission_requests))
        outcome: dict[str, Any] = {}

        async def finished() -> bool:
            nonlocal outcome
            outcome = await b.request("_acpctl/outcome", {"sessionId": sid, "idempotencyKey": key})
            return bool(outcome.get("state") == "completed")

        async with asyncio.timeout(30):
            while not await finished():
                await asyncio.sleep(0.1)
        assert outcome["stopReason"] == "end_turn"
        await b.wait_for(lambda: "allowed" in b.text(sid) or "permission:" in b.text(sid))


class StalledClient:
    """A WebSocket client that loads a session and then never reads again, on a socket with
    a small receive window (as a phone that lost its network: the server's sends block
    within kilobytes, not megabytes). Sans-I/O websockets over a plain socket, so that
    nothing reads on its behalf."""

    def __init__(self, port: int, secret: str) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(("127.0.0.1", port))
        self.protocol = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}/acp"))
        request = self.protocol.connect()
        request.headers["Authorization"] = f"Bearer {secret}"
        self.protocol.send_request(request)
        self._flush()
        while self.protocol.handshake_exc is None and not self._accepted():
            self.protocol.receive_data(self.sock.recv(65536))
        assert self.protocol.handshake_exc is None

    def _accepted(self) -> bool:
        return any(
            isinstance(e, Response) and e.status_code == 101
            for e in self.protocol.events_received()
        )

    def _flush(self) -> None:
        for data in self.protocol.data_to_send():
            if data:
                self.sock.sendall(data)

    def send(self, message: dict[str, Any]) -> None:
        self.protocol.send_text(json.dumps(message).encode())
        self._flush()

    def close(self) -> None:
        self.sock.close()


async def test_a_client_that_does_not_read_is_cut_off_and_others_are_unaffected(
    tmp_path: Path, db: str
) -> None:
    with running_server(tmp_path, "--send-buffer-bytes", str(1024 * 1024), db=db) as server:
        secret = server.secret
        async with ws_client(server.ws_url, secret) as reader:
            await reader.initialize()
            sid = await reader.new_session(str(tmp_path))
            slow = StalledClient(server.port, secret)
            slow.send(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {"protocolVersion": 1},
                }
            )
            load = {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
            slow.send({"jsonrpc": "2.0", "id": 2, "method": "session/load", "params": load})
            words = " ".join(f"{i:04d}" + "x" * 20_000 for i in range(50))  # ~1 MB a turn
            for _ in range(40):
                await asyncio.sleep(0.3)  # the stall must last: a burst alone is not one
                answer = await reader.prompt(sid, words)
                assert answer["stopReason"] == "end_turn"
                if "cut off: send buffer full" in server.stderr():
                    break
            assert "cut off: send buffer full" in server.stderr()
            # The reader was not cut: it got every update of every turn, and goes on.
            answer = await reader.prompt(sid, "still here")
            assert answer["stopReason"] == "end_turn"
            assert reader.text(sid).endswith("Echo: still here")
            assert server.stderr().count("cut off") == 1
            slow.close()


async def test_a_cancel_from_another_client_ends_the_running_turn(
    server: ListenServer, tmp_path: Path
) -> None:
    async with (
        ws_client(server.ws_url, server.secret) as a,
        ws_client(server.ws_url, server.secret) as b,
    ):
        await a.initialize()
        await b.initialize()
        sid = await a.new_session(str(tmp_path))
        await b.load(sid, str(tmp_path))
        turn = asyncio.create_task(a.prompt(sid, "#chunks=500 #delay=20 long"))
        await b.wait_for(lambda: len(b.updates(sid)) >= 5)
        await b.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
        assert (await turn)["stopReason"] == "cancelled"
        assert len([u for u in a.updates(sid) if "c4" in str(u)]) < 500


async def test_an_unanswered_permission_request_ends_cancelled_after_ask_timeout(
    tmp_path: Path, db: str
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[permissions]\nask_timeout_s = 1\n")
    with running_server(tmp_path, "--config", str(config), db=db) as server:
        async with ws_client(server.ws_url, server.secret, permission="ignore") as a:
            await a.initialize()
            sid = await a.new_session(str(tmp_path))
            answer = await a.prompt(sid, "#permission #tool go")
            assert answer["stopReason"] == "end_turn"
            assert len(a.permission_requests) == 1
            assert "permission: cancelled" in a.text(sid)
            assert a.withdrawn == [a.permission_requests[0]["id"]]


async def test_two_answers_at_once_one_wins_by_compare_and_set_in_the_store(
    server: ListenServer, tmp_path: Path
) -> None:
    second = make_token(server.db, "second")
    async with (
        ws_client(server.ws_url, server.secret, permission="ignore") as a,
        ws_client(server.ws_url, second, permission="ignore") as b,
    ):
        await a.initialize()
        await b.initialize()
        sid = await a.new_session(str(tmp_path))
        await b.load(sid, str(tmp_path))
        turn = asyncio.create_task(a.prompt(sid, "#permission #tool race"))
        await a.wait_for(lambda: bool(a.permission_requests))
        await b.wait_for(lambda: bool(b.permission_requests))
        request_id = a.permission_requests[0]["id"]
        # Both answer before either hears back: A allows, B rejects.
        await asyncio.gather(
            a.answer_permission(a.permission_requests[0], "allow"),
            b.answer_permission(b.permission_requests[0], "reject"),
        )
        assert (await turn)["stopReason"] == "end_turn"
        await a.wait_for(lambda: request_id in a.withdrawn or request_id in b.withdrawn)
        await asyncio.sleep(0.2)  # a second withdrawal, if there were one, would be here
        told = [c for c in (a, b) if request_id in c.withdrawn]
        assert len(told) == 1, "exactly one side lost, and was told once"
        assert told[0].withdrawn.count(request_id) == 1
    ((state, option, decided_by),) = query(
        server.db,
        "SELECT state, option_id, decided_by FROM permission_requests WHERE id = ?",
        (request_id,),
    )
    assert state == "answered"
    winner = "second" if told[0] is a else "tests"
    assert decided_by == winner
    expected = "permission: allowed" if winner == "tests" else "permission: rejected"
    assert expected in a.text(sid)
    assert option in {o["optionId"] for o in a.permission_requests[0]["params"]["options"]}


async def test_an_unanswered_request_is_withdrawn_on_record_when_the_turn_is_cancelled(
    server: ListenServer, tmp_path: Path
) -> None:
    async with ws_client(server.ws_url, server.secret, permission="ignore") as a:
        await a.initialize()
        sid = await a.new_session(str(tmp_path))
        turn = asyncio.create_task(a.prompt(sid, "#permission #tool never answered"))
        await a.wait_for(lambda: bool(a.permission_requests))
        request_id = a.permission_requests[0]["id"]
        await a.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
        assert (await turn)["stopReason"] == "cancelled"
        await a.wait_for(lambda: request_id in a.withdrawn)

    def state() -> str:
        ((found,),) = query(
            server.db, "SELECT state FROM permission_requests WHERE id = ?", (request_id,)
        )
        return str(found)

    async with asyncio.timeout(10):
        while state() != "withdrawn":
            await asyncio.sleep(0.05)
