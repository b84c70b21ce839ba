"""``acpctl serve --listen`` in front of the real agents (Claude Code, Codex, Gemini CLI):
two WebSocket clients on one session; the agent's permission request for a shell command
reaches both, the second one's answer lets the command run and the first is told it is
resolved; both see the same updates in the same order; a prompt from the second client
streams to the first."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest

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
