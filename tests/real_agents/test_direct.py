"""Drive each real agent (Claude Code, Codex, Gemini CLI) directly with the Python ACP SDK,
against the scripted stand-in model server on 127.0.0.1."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from acp import RequestError

from .client import RecordingClient, agent_connection, message_text, update_kinds
from .conftest import RealAgent
from .cp_helpers import wait_for

pytestmark = pytest.mark.timeout(120)

API_OF = {"claude": "anthropic", "codex": "openai", "gemini": "gemini"}


async def _prompt(conn, session_id: str, text: str, timeout: float = 90):
    from acp import text_block

    return await asyncio.wait_for(
        conn.prompt(session_id=session_id, prompt=[text_block(text)]), timeout
    )


def test_say_streams_message_chunks(real_agent: RealAgent) -> None:
    client = RecordingClient(real_agent.cwd)

    async def run() -> None:
        async with agent_connection(real_agent.launch, client, real_agent.cwd) as (conn, _, init):
            assert init.protocol_version == 1
            new = await asyncio.wait_for(
                conn.new_session(cwd=str(real_agent.cwd), mcp_servers=[]), 60
            )
            assert new.session_id
            client.clear()
            resp = await _prompt(conn, new.session_id, "SAY hello from the stand-in")
            assert resp.stop_reason == "end_turn"
            chunks = [u for u in client.updates if u.session_update == "agent_message_chunk"]
            assert len([c for c in chunks if getattr(c.content, "text", "")]) >= 2
            assert "hello from the stand-in" in message_text(client.updates)

    asyncio.run(run())
    reqs = real_agent.server.requests_for(API_OF[real_agent.name])
    assert any(r.directive and r.directive.kind == "say" for r in reqs)


def test_run_command_runs_in_cwd(real_agent: RealAgent) -> None:
    client = RecordingClient(real_agent.cwd)
    target = real_agent.cwd / "f.txt"

    async def run() -> None:
        async with agent_connection(real_agent.launch, client, real_agent.cwd) as (conn, _, _i):
            new = await asyncio.wait_for(
                conn.new_session(cwd=str(real_agent.cwd), mcp_servers=[]), 60
            )
            client.clear()
            resp = await _prompt(conn, new.session_id, "RUN echo ran >> f.txt")
            assert resp.stop_reason == "end_turn"

    asyncio.run(run())
    assert target.read_text() == "ran\n"
    # all three agents ask before running a shell command in their default modes
    assert client.permission_requests, update_kinds(client.updates)
    kinds = {o.kind for o in client.permission_requests[0]["options"]}
    assert {"allow_once", "reject_once"} <= kinds
    assert "tool_call" in update_kinds(client.updates) or "tool_call_update" in update_kinds(
        client.updates
    )
    assert message_text(client.updates).strip().startswith("done")
    # the tool result went back to the model
    reqs = real_agent.server.requests_for(API_OF[real_agent.name])
    assert sum(1 for r in reqs if r.directive and r.directive.kind == "run") >= 2


def test_no_traffic_leaves_loopback(real_agent: RealAgent) -> None:
    """Anything an agent tries to reach beyond 127.0.0.1 goes through the refusing proxy."""
    client = RecordingClient(real_agent.cwd)

    async def run() -> None:
        async with agent_connection(real_agent.launch, client, real_agent.cwd) as (conn, _, _i):
            new = await asyncio.wait_for(
                conn.new_session(cwd=str(real_agent.cwd), mcp_servers=[]), 60
            )
            await _prompt(conn, new.session_id, "SAY ok")

    asyncio.run(run())
    for r in real_agent.server.requests:
        assert r.headers.get("host", r.headers.get("Host", "")).startswith("127.0.0.1:")
    for b in real_agent.server.blocked:  # attempts were refused, never forwarded
        assert b["method"] in ("CONNECT", "GET", "POST", "HEAD")


def test_load_session_in_new_process_replays_history(real_agent: RealAgent) -> None:
    """All three agents persist sessions under HOME: ``session/load`` in a fresh process with
    the same HOME replays the earlier turn as session/update before answering."""
    first = RecordingClient(real_agent.cwd)
    second = RecordingClient(real_agent.cwd)

    async def run() -> list[Any]:
        async with agent_connection(real_agent.launch, first, real_agent.cwd) as (conn, _, init):
            assert init.agent_capabilities.load_session is True
            new = await asyncio.wait_for(
                conn.new_session(cwd=str(real_agent.cwd), mcp_servers=[]), 60
            )
            resp = await _prompt(conn, new.session_id, "SAY remember me")
            assert resp.stop_reason == "end_turn"
        async with agent_connection(real_agent.relaunch(), second, real_agent.cwd) as (
            conn,
            _,
            _i,
        ):
            await asyncio.wait_for(
                conn.load_session(
                    cwd=str(real_agent.cwd), session_id=new.session_id, mcp_servers=[]
                ),
                60,
            )
            if real_agent.name == "gemini":
                # Gemini CLI 0.61.0 answers session/load and streams the replay after it (its
                # loadSession starts streamHistory without awaiting it): give it the time.
                await asyncio.to_thread(
                    wait_for, lambda: "remember me" in message_text(second.updates), 10
                )
            replayed = list(second.updates)
            second.clear()
            resp = await _prompt(conn, new.session_id, "SAY still here")
            assert resp.stop_reason == "end_turn"
            assert "still here" in message_text(second.updates)
            return replayed

    try:
        replayed = asyncio.run(run())
    except RequestError as exc:
        if real_agent.name == "gemini" and "No previous sessions" in str(exc.data):
            # Measured with Gemini CLI 0.61.0: loading a one-turn session right after the first
            # process exits usually fails with -32603 {"details": "No previous sessions found
            # for this project."}: the loading process sets up a chat recording under the same
            # id, which rewrites the session file without the turn before it is read back.
            # When the read wins the race, it loads and replays (the path above).
            pytest.xfail(f"gemini session/load right after the first process: {exc.data}")
        raise
    prompts = [
        getattr(u.content, "text", "") for u in replayed if u.session_update == "user_message_chunk"
    ]
    if real_agent.name == "gemini" and not any("remember me" in p for p in prompts):
        # The same race, the other way: the file was read after its rewrite, and the
        # session loaded without its turn (not even the prompt was replayed).
        pytest.xfail("gemini loaded the session rewritten without its turn")
    assert "remember me" in message_text(replayed)
