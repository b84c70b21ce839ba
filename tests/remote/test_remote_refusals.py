"""Bad and unauthorised input over the network: each gets the right status or JSON-RPC
error, and nothing is written (the store's commands and sessions are counted before and
after)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import websockets
from websockets.typing import Origin

from store.tokens import TokenAccess, TokenSessions
from tests.support.direct_sql import query
from tests.support.remote_client import (
    ListenServer,
    RpcError,
    http_client,
    make_token,
    ws_client,
)

pytestmark = pytest.mark.anyio


def _counts(db: str) -> tuple[int, int]:
    ((sessions,),) = query(db, "SELECT count(*) FROM sessions")
    ((commands,),) = query(db, "SELECT count(*) FROM commands")
    return sessions, commands


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}


async def test_requests_without_a_valid_token_are_refused_401(server: ListenServer) -> None:
    async with httpx.AsyncClient() as http:
        for headers in (
            {},
            {"Authorization": "Bearer acpctl_not-a-token"},
            {"Authorization": "Basic dXNlcjpwYXNz"},
        ):
            response = await http.post(server.url, json=INIT, headers=headers)
            assert response.status_code == 401
            assert response.headers["www-authenticate"].startswith("Bearer")
    for headers in ({}, {"Authorization": "Bearer acpctl_wrong"}):
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with websockets.connect(server.ws_url, additional_headers=headers):
                pass
        assert refused.value.response.status_code == 401


async def test_a_revoked_token_is_refused_without_a_restart(
    server: ListenServer, tmp_path: Path
) -> None:
    secret = make_token(server.db, "soon-revoked")
    async with ws_client(server.ws_url, secret) as client:
        await client.initialize()
        revoke = [sys.executable, "-m", "control_plane.cli", "--db", server.db]
        subprocess.run([*revoke, "tokens", "revoke", "soon-revoked"], check=True)
        await asyncio.sleep(1.2)  # the server re-reads a token at most once a second
        before = _counts(server.db)
        with pytest.raises(ConnectionError):
            await client.new_session(str(tmp_path))
        assert _counts(server.db) == before
    async with httpx.AsyncClient() as http:
        response = await http.post(
            server.url, json=INIT, headers={"Authorization": f"Bearer {secret}"}
        )
        assert response.status_code == 401


async def test_a_watch_only_token_reads_and_changes_nothing(
    server: ListenServer, tmp_path: Path
) -> None:
    owner = server.secret
    watcher = make_token(server.db, "watcher", access=TokenAccess.WATCH)
    async with ws_client(server.ws_url, owner) as a, ws_client(server.ws_url, watcher) as w:
        await a.initialize()
        sid = await a.new_session(str(tmp_path))
        await a.prompt(sid, "hello")
        await w.initialize()
        await w.load(sid, str(tmp_path))
        assert "Echo: hello" in w.text(sid)
        before = _counts(server.db)
        for method, params in (
            ("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]}),
            ("session/new", {"cwd": str(tmp_path), "mcpServers": []}),
            ("session/close", {"sessionId": sid}),
            ("session/set_mode", {"sessionId": sid, "modeId": "plan"}),
        ):
            with pytest.raises(RpcError) as refused:
                await w.request(method, params)
            assert refused.value.code == -32003
            assert "watch-only" in refused.value.error["message"]
        assert _counts(server.db) == before
        # HTTP: the same refusal, answered on the session's stream (the POST is taken: a
        # 403 would end a TypeScript SDK client's whole transport).
        async with http_client(server.url, watcher) as h:
            await h.initialize()
            await h.open_session_stream(sid)
            with pytest.raises(RpcError) as refused:
                await h.prompt(sid, "x")
            assert refused.value.code == -32003
        assert _counts(server.db) == before


async def test_a_token_scoped_to_its_own_sessions_cannot_reach_another_tokens(
    server: ListenServer, tmp_path: Path
) -> None:
    mine = make_token(server.db, "mine", sessions=TokenSessions.OWN)
    other = make_token(server.db, "other", sessions=TokenSessions.OWN)
    async with ws_client(server.ws_url, mine) as a, ws_client(server.ws_url, other) as b:
        await a.initialize()
        await b.initialize()
        sid = await a.new_session(str(tmp_path))
        before = _counts(server.db)
        for method, params in (
            ("session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}),
            ("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]}),
        ):
            with pytest.raises(RpcError) as refused:
                await b.request(method, params)
            assert refused.value.code == -32003
        assert _counts(server.db) == before
        listed = await b.request("session/list", {})
        assert sid not in [s["sessionId"] for s in listed["sessions"]]
        assert (await a.prompt(sid, "mine"))["stopReason"] == "end_turn"


async def test_malformed_http_requests_get_the_right_status(server: ListenServer) -> None:
    secret = server.secret
    auth = {"Authorization": f"Bearer {secret}"}
    before = _counts(server.db)
    async with httpx.AsyncClient() as http:

        async def post(body: bytes, **headers: str) -> httpx.Response:
            return await http.post(server.url, content=body, headers={**auth, **headers})

        json_type = {"Content-Type": "application/json"}
        assert (await post(b"{}", **{"Content-Type": "text/plain"})).status_code == 415
        garbage = await post(b"{not json", **json_type)
        assert garbage.status_code == 400 and garbage.json()["error"]["code"] == -32700
        batch = await post(b'[{"jsonrpc":"2.0","id":1,"method":"initialize"}]', **json_type)
        assert batch.status_code == 400 and "batches" in batch.json()["error"]["message"]
        deep = await post(b"[" * 100_000 + b"]" * 100_000, **json_type)
        assert deep.status_code == 400
        oversize = await post(b'{"x":"' + b"y" * (9 * 1024 * 1024) + b'"}', **json_type)
        assert oversize.status_code == 413
        unknown = await post(
            b'{"jsonrpc":"2.0","id":3,"method":"session/list","params":{}}',
            **json_type,
            **{"Acp-Connection-Id": "0" * 32},
        )
        assert unknown.status_code == 404
        missing = await post(b'{"jsonrpc":"2.0","id":3,"method":"session/list"}', **json_type)
        assert missing.status_code == 400
        stream = await http.get(server.url, headers={**auth, "Accept": "application/json"})
        assert stream.status_code == 406
        assert (await http.put(server.url, headers=auth)).status_code == 405
    assert _counts(server.db) == before


async def test_garbage_websocket_frames_get_json_rpc_errors_and_the_connection_goes_on(
    server: ListenServer, tmp_path: Path
) -> None:
    async with ws_client(server.ws_url, server.secret) as client:
        for frame in ("{not json", "[1, 2]", '"a string"', "[" * 50_000, '{"jsonrpc":"2.0"}'):
            count = len(client.notifications)
            await client.send_text(frame)
            del count
        await client.initialize()
        sid = await client.new_session(str(tmp_path))
        assert (await client.prompt(sid, "after garbage"))["stopReason"] == "end_turn"
        unknown = await client.request_raw("session/nonsense", {})
        assert unknown["error"]["code"] == -32601


async def test_the_cookie_counts_only_from_the_servers_own_pages(
    server: ListenServer, tmp_path: Path
) -> None:
    cookie = {"Cookie": f"acpctl_token={server.secret}"}
    own = f"http://127.0.0.1:{server.port}"
    async with ws_client(
        server.ws_url, None, additional_headers={**cookie}, origin=Origin(own)
    ) as ok:
        await ok.initialize()
    # A page of another site opening a WebSocket here carries the cookie: refused.
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(
            server.ws_url, additional_headers=cookie, origin=Origin("https://evil.example")
        ):
            pass
    assert refused.value.response.status_code == 401
    async with httpx.AsyncClient() as http:
        response = await http.post(
            server.url, json=INIT, headers={**cookie, "Origin": "https://evil.example"}
        )
        assert response.status_code == 401
        response = await http.post(server.url, json=INIT, headers={**cookie, "Origin": own})
        assert response.status_code == 200
