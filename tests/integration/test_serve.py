"""`acpctl serve` end to end: a real serve subprocess, driven by the SDK's client over stdio,
in front of the example agent."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp import Client as AcpClient
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    RequestPermissionResponse,
)

from tests.support.direct_sql import query


def _serve_argv(tmp: Path, db: str, invocations: Path | None = None) -> list[str]:
    agent = f"{sys.executable} -m protocol.example_agent --state-file {tmp / 'agent-state.json'}"
    agent += f" --starts-file {tmp / 'starts.txt'}"
    if invocations is not None:
        agent += f" --invocations-file {invocations}"
    return ["-m", "control_plane.cli", "--db", db, "serve", "--agent", agent]


class Client:
    def __init__(self, permission: str = "allow") -> None:
        self.updates: list[dict[str, Any]] = []
        self.slash_commands: list[dict[str, Any]] = []
        self.permission = permission
        self.asked: list[str] = []

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        dumped = update.model_dump(by_alias=True, exclude_none=True)
        if dumped.get("sessionUpdate") == "available_commands_update":
            self.slash_commands.append(dumped)  # sent after session/new: not a turn's
            return
        self.updates.append(dumped)

    async def request_permission(
        self, session_id: str, tool_call: Any, options: Any, **_: Any
    ) -> Any:
        self.asked.append(session_id)
        wanted = "allow_once" if self.permission == "allow" else "reject_once"
        chosen = next(o.option_id for o in options if o.kind == wanted)
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=chosen)
        )

    def text(self) -> str:
        return "".join(
            u["content"].get("text", "")
            for u in self.updates
            if u["sessionUpdate"] == "agent_message_chunk"
        )


def _env(tmp: Path) -> dict[str, str]:
    return {
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "ACPCTL_CONFIG": str(tmp / "none.toml"),
        "HOME": str(tmp),
    }


async def _session(
    tmp: Path, db: str, client: Client, body: Any, invocations: Path | None = None
) -> Any:
    (tmp / "none.toml").write_text("")
    with (tmp / "serve.log").open("ab") as log:
        return await _run_client(tmp, db, client, body, log.fileno(), invocations)


async def _run_client(
    tmp: Path, db: str, client: Client, body: Any, log: int, invocations: Path | None = None
) -> Any:
    # Client is duck-typed: it answers only the callbacks used, not all of acp.Client.
    async with spawn_agent_process(
        cast(AcpClient, client),
        sys.executable,
        *_serve_argv(tmp, db, invocations),
        env=_env(tmp),
        cwd=str(tmp),
        transport_kwargs={"stderr": log, "shutdown_timeout": 5},
    ) as (conn, proc):
        init = await conn.initialize(
            protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities()
        )
        return await body(conn, proc, init)


def test_new_prompt_stream_list_and_close(tmp_path: Path, db: str) -> None:
    client = Client()

    async def body(conn: Any, proc: Any, init: Any) -> None:
        caps = init.agent_capabilities
        assert caps.load_session is True
        assert (
            caps.session_capabilities.list is not None
            and caps.session_capabilities.resume is not None
        )
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        response = await conn.prompt(session_id=sid, prompt=[text_block("#chunks=20 hi")])
        assert response.stop_reason == "end_turn"
        chunks = [u for u in client.updates if u["sessionUpdate"] == "agent_message_chunk"]
        assert [c["content"]["text"] for c in chunks][:3] == ["c0 ", "c1 ", "c2 "]
        assert len(chunks) == 20  # every update arrived before the response
        listed = await conn.list_sessions()
        assert [s.session_id for s in listed.sessions] == [sid]
        await conn.close_session(session_id=sid)
        with pytest.raises(RequestError) as info:
            await conn.prompt(session_id=sid, prompt=[text_block("after close")])
        assert info.value.code == -32602

    asyncio.run(asyncio.wait_for(_session(tmp_path, db, client, body), 90))


def test_cancel_ends_the_turn_with_cancelled(tmp_path: Path, db: str) -> None:
    client = Client()

    async def body(conn: Any, proc: Any, init: Any) -> str:
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        turn = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("#hang")]))
        for _ in range(600):  # until the turn is streaming (agent start may be slow here)
            if client.updates:
                break
            await asyncio.sleep(0.1)
        await conn.cancel(session_id=sid)
        stop_reason: str = (await asyncio.wait_for(turn, 30)).stop_reason
        return stop_reason

    assert asyncio.run(asyncio.wait_for(_session(tmp_path, db, client, body), 120)) == "cancelled"


@pytest.mark.parametrize(("answer", "expected"), [("allow", "allowed"), ("reject", "rejected")])
def test_permission_requests_reach_the_client_and_its_answer_goes_back(
    tmp_path: Path, db: str, answer: str, expected: str
) -> None:
    client = Client(permission=answer)

    async def body(conn: Any, proc: Any, init: Any) -> None:
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        await conn.prompt(session_id=sid, prompt=[text_block("#permission #tool go")])
        assert client.asked == [sid]  # asked with the control plane's session id
        assert f"permission: {expected}" in client.text()

    asyncio.run(asyncio.wait_for(_session(tmp_path, db, client, body), 90))


def test_the_first_serve_of_a_new_store_starts_its_agent_once(tmp_path: Path, db: str) -> None:
    """``initialize`` needs the agent's capabilities before any session exists: they are
    asked of the process started ahead for the first session, which that session then
    adopts. Once recorded, a later serve answers from the store (and starts one too)."""
    invocations = tmp_path / "invocations.jsonl"

    async def body(conn: Any, proc: Any, init: Any) -> None:
        assert init.agent_capabilities.load_session is True
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        response = await conn.prompt(session_id=sid, prompt=[text_block("first")])
        assert response.stop_reason == "end_turn"

    for _ in range(2):
        asyncio.run(asyncio.wait_for(_session(tmp_path, db, Client(), body, invocations), 90))
    starts = (tmp_path / "starts.txt").read_text().split()
    prompted = [json.loads(line)["pid"] for line in invocations.read_text().splitlines()]
    assert len(starts) == 2, starts  # one agent per serve, the new store's first included
    assert [int(pid) for pid in starts] == prompted  # and that agent ran the prompt


def test_a_retried_prompt_with_the_same_key_runs_once_and_streams_the_same_updates(
    tmp_path: Path, db: str
) -> None:
    client = Client()
    invocations = tmp_path / "invocations.jsonl"

    async def body(conn: Any, proc: Any, init: Any) -> None:
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        prompt = [text_block("#chunks=7 once")]
        first = await conn.prompt(session_id=sid, prompt=prompt, idempotencyKey="k-1")
        live = list(client.updates)
        client.updates.clear()
        again = await conn.prompt(session_id=sid, prompt=prompt, idempotencyKey="k-1")
        assert (first.stop_reason, again.stop_reason) == ("end_turn", "end_turn")
        assert client.updates == live  # the stored updates, once each, in order
        assert len([u for u in live if u["sessionUpdate"] == "agent_message_chunk"]) == 7

    asyncio.run(asyncio.wait_for(_session(tmp_path, db, client, body, invocations), 90))
    runs = [json.loads(line) for line in invocations.read_text().splitlines()]
    assert len([r for r in runs if "once" in json.dumps(r)]) == 1  # the agent ran it once


def test_load_after_kill_9_replays_the_stored_conversation_and_continues(
    tmp_path: Path, db: str
) -> None:
    first = Client()

    async def live(conn: Any, proc: Any, init: Any) -> str:
        sid: str = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        await conn.prompt(session_id=sid, prompt=[text_block("remember the fig")])
        await conn.prompt(session_id=sid, prompt=[text_block("#tool and the date")])
        os.kill(proc.pid, signal.SIGKILL)  # serve dies; its backend agent dies with it
        await proc.wait()
        return sid

    sid = asyncio.run(asyncio.wait_for(_session(tmp_path, db, first, live), 90))
    second = Client()

    async def reload(conn: Any, proc: Any, init: Any) -> None:
        await conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
        replayed = list(second.updates)
        users = [
            u["content"]["text"] for u in replayed if u["sessionUpdate"] == "user_message_chunk"
        ]
        assert users == ["remember the fig", "#tool and the date"]
        agent_side = [u for u in replayed if u["sessionUpdate"] != "user_message_chunk"]
        assert agent_side == first.updates  # the exact updates the first client saw live
        second.updates.clear()
        await conn.prompt(session_id=sid, prompt=[text_block("#history")])
        assert "remember the fig" in second.text()

    asyncio.run(asyncio.wait_for(_session(tmp_path, db, second, reload), 90))


def test_bad_client_input_gets_json_rpc_errors_and_serving_continues(
    tmp_path: Path, db: str
) -> None:
    (tmp_path / "none.toml").write_text("")
    log = (tmp_path / "serve.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, *_serve_argv(tmp_path, db), "--max-frame-bytes", "4096"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        env={**os.environ, **_env(tmp_path)},
        cwd=tmp_path,
    )
    assert proc.stdin is not None and proc.stdout is not None

    def send(raw: bytes) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(raw + b"\n")
        proc.stdin.flush()
        reply: dict[str, Any] = json.loads(proc.stdout.readline())
        return reply

    try:
        assert send(b"{not json")["error"]["code"] == -32700
        assert send(b"[1, 2, 3]")["error"]["code"] == -32600
        # Nested deeper than any parser recurses (orjson refuses it, the standard library
        # raised RecursionError and serve shut down): a parse error, and serving goes on.
        assert send(b"[" * 1100 + b"]" * 1100)["error"]["code"] == -32700
        assert (
            send(b'{"jsonrpc":"2.0","id":1,"method":"' + b"x" * 5000 + b'"}')["error"]["code"]
            == -32600
        )
        reply = send(b'{"jsonrpc":"2.0","id":2,"method":"no/such/method","params":{}}')
        assert reply["id"] == 2 and reply["error"]["code"] == -32601
        reply = send(
            b'{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"x"}}'
        )
        assert reply["id"] == 3 and reply["error"]["code"] == -32602
        reply = send(
            b'{"jsonrpc":"2.0","id":4,"method":"session/prompt","params":'
            b'{"sessionId":"nope","prompt":[{"type":"text","text":"hi"}]}}'
        )
        assert reply["id"] == 4 and reply["error"]["code"] == -32602
        reply = send(b'{"jsonrpc":"2.0","id":5,"method":"session/list","params":{}}')
        assert reply["id"] == 5 and reply["result"]["sessions"] == []  # still serving
    finally:
        proc.stdin.close()
        proc.wait(30)
        log.close()
    assert proc.returncode == 0  # the client closed stdin: the one normal end
    assert query(db, "select count(*) from sessions") == [(0,)]  # store untouched


# SQLite-only: the store's file is deleted under serve.
def test_serve_exits_1_with_a_log_line_when_its_store_file_is_deleted(tmp_path: Path) -> None:
    """Every end but the client closing stdin is an error the operator must see."""
    (tmp_path / "none.toml").write_text("")
    log_path = tmp_path / "serve.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, *_serve_argv(tmp_path, str(tmp_path / "cp.db"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env={**os.environ, **_env(tmp_path)},
            cwd=tmp_path,
        )
    assert proc.stdin is not None and proc.stdout is not None

    def send(request: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", **request}).encode() + b"\n")
        proc.stdin.flush()

    def answer(request_id: int) -> dict[str, Any]:
        assert proc.stdout is not None
        while True:
            message: dict[str, Any] = json.loads(proc.stdout.readline())
            if message.get("id") == request_id:
                return message

    try:
        send({"id": 1, "method": "initialize", "params": {"protocolVersion": PROTOCOL_VERSION}})
        assert "result" in answer(1)
        send({"id": 2, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}})
        session_id = answer(2)["result"]["sessionId"]
        for side in tmp_path.glob("cp.db*"):
            side.unlink()
        send(
            {
                "id": 3,
                "method": "session/prompt",
                "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]},
            }
        )
        assert proc.wait(30) == 1  # stdin still open: serve ended on its own
    finally:
        proc.kill()
        proc.wait(10)
    text = log_path.read_text()
    assert "exiting 1, the store refuses every write" in text and "deleted or replaced" in text
