"""``acpctl serve --listen`` in front of the real agents (Claude Code, Codex, Gemini CLI):
two WebSocket clients on one session; the agent's permission request for a shell command
reaches both, the second one's answer lets the command run and the first is told it is
resolved; both see the same updates in the same order; a prompt from the second client
streams to the first. And across two ``serve --listen`` processes on one store: the client
that asked node A goes away, node B's console answers, the agent runs the command."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.direct_sql import query
from tests.support.remote_client import RpcClient, make_token, ws_client

from .conftest import RealAgent
from .cp_helpers import ControlPlaneFiles


def _listening_port(log: Path, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r"listening on http://127\.0\.0\.1:(\d+)/acp", log.read_text())
        if found:
            return int(found.group(1))
        time.sleep(0.05)
    raise AssertionError(log.read_text())


def _agent_updates(client: RpcClient, sid: str, after: int) -> list[tuple[int, Any]]:
    return [
        (u["_meta"]["acpctl"]["position"], u["update"])
        for u in client.updates(sid)
        if u["_meta"]["acpctl"]["position"] > after
        and u["update"].get("sessionUpdate") != "user_message_chunk"
    ]


@pytest.mark.timeout(180)
def test_two_remote_clients_share_a_real_agents_session(
    real_agent: RealAgent, tmp_path: Path
) -> None:
    cp = ControlPlaneFiles(tmp_path / "cp", real_agent.name)
    cp.write_config(real_agent.launch, by_name=True)  # `serve --listen --agent NAME`
    secret = make_token(cp.db, "real-agents")
    log = cp.root / "listen.log"
    proc = cp.popen("serve", "--listen", "127.0.0.1:0", "--agent", cp.agent, log=log)
    cwd = real_agent.cwd
    try:
        url = f"ws://127.0.0.1:{_listening_port(log)}/acp"

        async def run() -> None:
            async with (
                ws_client(url, secret, permission="ignore") as a,
                ws_client(url, secret, permission="ignore") as b,
            ):
                await a.initialize()
                await b.initialize()
                new = await a.request(
                    "session/new", {"cwd": str(cwd), "mcpServers": []}, timeout=120
                )
                sid = new["sessionId"]
                loaded = await b.load(sid, str(cwd))
                after = loaded["_meta"]["acpctl"]["position"]
                turn = asyncio.create_task(a.prompt(sid, "RUN echo remote >> side.txt"))
                await b.wait_for(lambda: bool(b.permission_requests), 90)
                await a.wait_for(lambda: bool(a.permission_requests), 30)
                request = b.permission_requests[0]
                assert request["id"] == a.permission_requests[0]["id"]
                await b.answer_permission(request, "allow")
                assert (await turn)["stopReason"] == "end_turn"
                await a.wait_for(lambda: request["id"] in a.withdrawn, 30)
                await b.wait_for(
                    lambda: _agent_updates(b, sid, after) == _agent_updates(a, sid, after), 30
                )
                kinds = {u.get("sessionUpdate") for _, u in _agent_updates(a, sid, after)}
                assert "agent_message_chunk" in kinds
                assert kinds & {"tool_call", "tool_call_update"}, kinds
                assert "done" in a.text(sid)
                answer = await b.prompt(sid, "SAY from the second client")
                assert answer["stopReason"] == "end_turn"
                await a.wait_for(lambda: "from the second client" in a.text(sid), 60)

        asyncio.run(run())
        assert (cwd / "side.txt").read_text() == "remote\n"
    finally:
        proc.terminate()
        proc.wait(60)


def _console_answer(
    port: int, secret: str, sid: str, request_id: str, option_id: str
) -> dict[str, Any]:
    path = f"/api/sessions/{sid}/permissions/{urllib.parse.quote(request_id)}"
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        json.dumps({"optionId": option_id}).encode(),
        {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        body: dict[str, Any] = json.loads(answer.read())
        return body


@pytest.mark.timeout(240)
def test_a_real_agents_permission_asked_on_one_node_is_answered_on_another(
    real_agent: RealAgent, tmp_path: Path
) -> None:
    """Two ``serve --listen`` processes on one SQLite file: the real agent runs on node A,
    asks to run a shell command; the client that asked disconnects; node B's console API
    answers (B never asked); the agent runs the command and the turn ends."""
    cp = ControlPlaneFiles(tmp_path / "cp", real_agent.name)
    cp.write_config(real_agent.launch, by_name=True)
    secret = make_token(cp.db, "real-agents")
    procs = []
    try:
        ports = []
        for node in ("a", "b"):
            log = cp.root / f"listen-{node}.log"
            procs.append(cp.popen("serve", "--listen", "127.0.0.1:0", "--agent", cp.agent, log=log))
            ports.append(_listening_port(log))
        cwd = real_agent.cwd

        async def ask_on_a() -> tuple[str, dict[str, Any]]:
            url = f"ws://127.0.0.1:{ports[0]}/acp"
            async with ws_client(url, secret, permission="ignore") as a:
                await a.initialize()
                new = await a.request(
                    "session/new", {"cwd": str(cwd), "mcpServers": []}, timeout=120
                )
                sid = new["sessionId"]
                turn = asyncio.create_task(a.prompt(sid, "RUN echo across >> side.txt"))
                await a.wait_for(lambda: bool(a.permission_requests), 90)
                turn.cancel()  # the client goes away; the turn waits on node A
                return sid, a.permission_requests[0]

        sid, request = asyncio.run(ask_on_a())
        # Each agent names its options its own way: the one that allows this once.
        (allow,) = [
            o["optionId"] for o in request["params"]["options"] if o["kind"] == "allow_once"
        ]
        record = _console_answer(ports[1], secret, sid, request["id"], allow)
        assert (record["state"], record["optionId"]) == ("answered", allow)
        deadline = time.monotonic() + 120
        state = None
        while time.monotonic() < deadline:
            rows = query(
                cp.db, "SELECT state FROM commands WHERE session_id = ? ORDER BY seq", (sid,)
            )
            state = rows[-1][0] if rows else None
            if state in ("completed", "failed", "cancelled"):
                break
            time.sleep(0.2)
        assert state == "completed", state
        assert (cwd / "side.txt").read_text() == "across\n"
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
