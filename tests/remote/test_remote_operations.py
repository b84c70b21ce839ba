"""Operating ``serve --listen``: health and readiness, a SIGTERM that lets running turns
finish, and refusing to listen beyond loopback in clear text."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trustme
import websockets

from tests.support.remote_client import ListenServer, make_token, running_server, ws_client

pytestmark = pytest.mark.anyio


async def test_healthz_and_readyz_answer_without_a_token(server: ListenServer) -> None:
    base = server.url.removesuffix("/acp")
    async with httpx.AsyncClient() as http:
        assert (await http.get(base + "/healthz")).text == "ok"
        ready = await http.get(base + "/readyz")
        assert ready.status_code == 200 and ready.text == "ready"


async def test_metrics_need_a_token_and_the_access_log_names_the_token_not_its_secret(
    server: ListenServer, tmp_path: Path
) -> None:
    base = server.url.removesuffix("/acp")
    async with ws_client(server.ws_url, server.secret) as client:
        await client.initialize()
        sid = await client.new_session(str(tmp_path))
        await client.prompt(sid, "counted")
    async with httpx.AsyncClient() as http:
        assert (await http.get(base + "/metrics")).status_code == 401
        scraped = await http.get(
            base + "/metrics", headers={"Authorization": f"Bearer {server.secret}"}
        )
        assert scraped.status_code == 200
        assert "acpctl_remote_refused_total" in scraped.text
        assert 'acpctl_remote_refused_total{status="401"} 1.0' in scraped.text
        assert "acpctl_turns_total" in scraped.text or "acpctl_live_sessions" in scraped.text
    log = server.stderr()
    assert "acpctl.access" in log and "GET /metrics 401" in log
    assert "WS /acp 101" in log and "token=tests" in log
    assert server.secret not in log


async def test_sigterm_lets_the_running_turn_finish_then_exits_0(tmp_path: Path, db: str) -> None:
    with running_server(tmp_path, "--grace", "30", db=db) as server:
        secret = server.secret
        async with ws_client(server.ws_url, secret) as client:
            await client.initialize()
            sid = await client.new_session(str(tmp_path))
            turn = asyncio.create_task(client.prompt(sid, "#chunks=40 #delay=25 go"))
            await client.wait_for(lambda: len(client.updates(sid)) >= 5)
            assert server.proc is not None
            server.proc.send_signal(15)
            answer = await turn  # the turn finishes and its answer still reaches the client
            assert answer["stopReason"] == "end_turn"
            chunks = [u for u in client.text(sid).split() if u.startswith("c")]
            assert len(chunks) == 40
        code = await asyncio.to_thread(server.proc.wait, 60)
        assert code == 0


async def test_sigterm_past_the_grace_period_interrupts_the_turn_and_records_it(
    tmp_path: Path, db: str
) -> None:
    with running_server(tmp_path, "--grace", "0.5", db=db) as server:
        secret = server.secret
        async with ws_client(server.ws_url, secret) as client:
            await client.initialize()
            sid = await client.new_session(str(tmp_path))
            turn = asyncio.create_task(client.prompt(sid, "#chunks=400 #delay=50 go", key="k"))
            await client.wait_for(lambda: len(client.updates(sid)) >= 3)
            assert server.proc is not None
            server.proc.send_signal(15)
            with pytest.raises(ConnectionError):
                await turn
        assert await asyncio.to_thread(server.proc.wait, 60) == 0
        server.start()
        async with ws_client(server.ws_url, secret) as client:
            await client.initialize()
            found = await client.request(
                "_acpctl/outcome", {"sessionId": sid, "idempotencyKey": "k"}
            )
            assert found["state"] == "interrupted"


def test_listening_beyond_loopback_without_tls_is_refused(db: str) -> None:
    argv = [sys.executable, "-m", "control_plane.cli", "--db", db]
    refused = subprocess.run(
        [*argv, "serve", "--listen", "0.0.0.0:0"], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2
    assert "without TLS" in refused.stderr and "--insecure-no-tls" in refused.stderr
    half = subprocess.run(
        [*argv, "serve", "--listen", "127.0.0.1:0", "--cert", "c.pem"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert half.returncode == 2 and "--cert and --key go together" in half.stderr


async def test_tls_serves_wss_with_the_given_certificate(tmp_path: Path, db: str) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    server = ListenServer(
        tmp_path, "--cert", str(tmp_path / "cert.pem"), "--key", str(tmp_path / "key.pem"), db=db
    )
    secret = make_token(server.db, "tests")
    server.start()
    try:
        assert "listening on https://" in server.stderr()
        context = ssl.create_default_context()
        ca.configure_trust(context)
        url = f"wss://127.0.0.1:{server.port}/acp"
        async with ws_client(url, secret, ssl=context) as client:
            await client.initialize()
            sid = await client.new_session(str(tmp_path))
            assert (await client.prompt(sid, "over tls"))["stopReason"] == "end_turn"
        # Plain text to the TLS port gets nowhere; an untrusted client refuses the server.
        async with httpx.AsyncClient() as http:
            with pytest.raises(httpx.HTTPError):
                await http.get(f"http://127.0.0.1:{server.port}/healthz")
        with pytest.raises(ssl.SSLError):
            async with ws_client(url, secret, ssl=ssl.create_default_context()):
                pass
    finally:
        server.stop()


async def test_connections_past_the_limit_are_refused_503_until_one_leaves(
    tmp_path: Path, db: str
) -> None:
    with running_server(tmp_path, "--max-connections", "2", db=db) as server:
        secret = server.secret
        async with ws_client(server.ws_url, secret) as a, ws_client(server.ws_url, secret) as b:
            await a.initialize()
            await b.initialize()
            with pytest.raises(websockets.InvalidStatus) as refused:
                async with ws_client(server.ws_url, secret):
                    pass
            assert refused.value.response.status_code == 503
            async with httpx.AsyncClient() as http:
                init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
                response = await http.post(
                    server.url, json=init, headers={"Authorization": f"Bearer {secret}"}
                )
                assert response.status_code == 503
        # Both closed: room again, once the server has seen them go.
        async with asyncio.timeout(30):
            while True:
                try:
                    async with ws_client(server.ws_url, secret) as c:
                        await c.initialize()
                    break
                except websockets.InvalidStatus as exc:
                    assert exc.response.status_code == 503
                    await asyncio.sleep(0.1)
