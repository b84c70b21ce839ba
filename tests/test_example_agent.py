"""The example agent driven as a real subprocess over stdio with the official ACP SDK client."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp.client.connection import ClientSideConnection
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    FileSystemCapabilities,
    ReadTextFileResponse,
    RequestPermissionResponse,
    WriteTextFileResponse,
)

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(30)


class RecordingClient:
    """A duck-typed ACP client that records everything and serves an in-memory filesystem."""

    def __init__(self, permission: str = "allow") -> None:
        self.updates: list[Any] = []
        self.permission_requests: list[dict[str, Any]] = []
        self.permission = permission
        self.files: dict[str, str] = {}
        self.reads: list[tuple[str, int | None, int | None]] = []

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append(update)

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **_: Any
    ) -> RequestPermissionResponse:
        self.permission_requests.append({"tool_call": tool_call, "options": options})
        if self.permission == "hang":
            await asyncio.Event().wait()
        outcome = AllowedOutcome(outcome="selected", option_id=self.permission)
        return RequestPermissionResponse(outcome=outcome)

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **_: Any
    ) -> ReadTextFileResponse:
        self.reads.append((path, line, limit))
        if path not in self.files:
            raise RequestError.resource_not_found(path)
        return ReadTextFileResponse(content=self.files[path])

    async def write_text_file(
        self, session_id: str, path: str, content: str, **_: Any
    ) -> WriteTextFileResponse:
        self.files[path] = content
        return WriteTextFileResponse()

    def kinds(self) -> list[str]:
        return [u.session_update for u in self.updates]

    def texts(self, kind: str = "agent_message_chunk") -> list[str]:
        return [u.content.text for u in self.updates if u.session_update == kind]

    def reply(self) -> str:
        return "".join(self.texts())


@asynccontextmanager
async def running_agent(
    tmp_path: Path, client: RecordingClient, *flags: str, **conn_kwargs: Any
) -> AsyncIterator[tuple[ClientSideConnection, asyncio.subprocess.Process]]:
    """Spawn the agent (state in tmp_path, stderr to a file so it can never block)."""
    with open(tmp_path / "agent.stderr", "ab") as stderr:
        async with spawn_agent_process(
            client,
            sys.executable,
            "-m",
            "protocol.example_agent",
            "--state-file",
            str(tmp_path / "state.json"),
            *flags,
            env={"PYTHONPATH": str(ROOT)},  # spawn_agent_process does not inherit os.environ
            cwd=tmp_path,
            transport_kwargs={"stderr": stderr, "shutdown_timeout": 2.0},
            **conn_kwargs,
        ) as (conn, proc):
            yield conn, proc


async def start(conn: ClientSideConnection, cwd: Path) -> str:
    """Initialize with fs capabilities and open a new session."""
    fs = FileSystemCapabilities(read_text_file=True, write_text_file=True)
    await conn.initialize(
        protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities(fs=fs)
    )
    return (await conn.new_session(cwd=str(cwd), mcp_servers=[])).session_id


async def say(conn: ClientSideConnection, sid: str, text: str) -> Any:
    return await conn.prompt(session_id=sid, prompt=[text_block(text)])


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


def test_initialize_advertises_identity_and_capabilities(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_agent(tmp_path, RecordingClient()) as (conn, _):
            init = await conn.initialize(protocol_version=PROTOCOL_VERSION)
        async with running_agent(tmp_path, RecordingClient(), "--no-resume") as (conn, _):
            no_resume = await conn.initialize(protocol_version=PROTOCOL_VERSION)
        caps = init.agent_capabilities
        assert caps is not None and caps.session_capabilities is not None
        assert init.agent_info is not None
        assert (init.agent_info.name, init.agent_info.version) == ("example-agent", "0.1.0")
        assert caps.load_session is True
        assert caps.prompt_capabilities is not None
        assert caps.prompt_capabilities.image is False
        assert caps.prompt_capabilities.embedded_context is True
        sc = caps.session_capabilities
        assert sc.resume is not None and sc.close is not None and sc.list is not None
        nc = no_resume.agent_capabilities
        assert nc is not None and nc.session_capabilities is not None
        assert nc.session_capabilities.resume is None

    asyncio.run(scenario())


def test_default_prompt_thinks_then_echoes_word_by_word_with_usage(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = RecordingClient()
        async with running_agent(tmp_path, client) as (conn, _):
            sid = await start(conn, tmp_path)
            resp = await say(conn, sid, "hello brave world")
        assert client.kinds()[0] == "agent_thought_chunk"
        assert client.texts("agent_thought_chunk") == ["Considering: hello brave world"]
        assert client.texts() == ["Echo: ", "hello ", "brave ", "world"]
        assert resp.stop_reason == "end_turn"
        assert resp.usage is not None
        assert (resp.usage.input_tokens, resp.usage.output_tokens) == (3, 4)
        assert resp.usage.total_tokens == 7

    asyncio.run(scenario())


def test_hundred_chunks_arrive_in_order(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = RecordingClient()
        async with running_agent(tmp_path, client) as (conn, _):
            sid = await start(conn, tmp_path)
            resp = await say(conn, sid, "#chunks=100")
        assert client.texts() == [f"c{i} " for i in range(100)]
        assert resp.usage is not None and resp.usage.output_tokens == 100

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("choice", "verdict", "final_status"),
    [("allow", "allowed", "completed"), ("reject", "rejected", "failed")],
)
def test_tool_call_with_permission(
    tmp_path: Path, choice: str, verdict: str, final_status: str
) -> None:
    async def scenario() -> None:
        client = RecordingClient(permission=choice)
        async with running_agent(tmp_path, client) as (conn, _):
            sid = await start(conn, tmp_path)
            await say(conn, sid, "look #tool #permission")
        [request] = client.permission_requests
        assert [(o.option_id, o.kind) for o in request["options"]] == [
            ("allow", "allow_once"),
            ("reject", "reject_once"),
        ]
        tool_updates = [u for u in client.updates if u.session_update.startswith("tool_call")]
        assert tool_updates[0].tool_call_id == request["tool_call"].tool_call_id == "tool-1"
        assert (tool_updates[0].title, tool_updates[0].kind) == ("echo-tool", "read")
        assert tool_updates[0].raw_input == {"message": "look"}
        statuses = [u.status for u in tool_updates]
        assert statuses[0] == "pending" and statuses[-1] == final_status
        if verdict == "allowed":
            assert statuses == ["pending", "in_progress", "completed"]
            assert tool_updates[-1].content[0].content.text == "tool output: look"
        assert f"permission: {verdict}" in client.reply()

    asyncio.run(scenario())


def test_fs_directives_go_through_the_client(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = RecordingClient()
        client.files["/data/in.txt"] = "alpha"
        async with running_agent(tmp_path, client) as (conn, _):
            sid = await start(conn, tmp_path)
            await say(conn, sid, "#read=/data/in.txt #write=/data/out.txt:beta")
            first = client.reply()
            client.updates.clear()
            await say(conn, sid, "#readlines=/data/in.txt:3:7")
            await say(conn, sid, "#read=/missing.txt")
            second = client.reply()
        assert "read: alpha" in first and "wrote: /data/out.txt" in first
        assert client.files["/data/out.txt"] == "beta"
        assert client.reads[1] == ("/data/in.txt", 3, 7)
        assert "read error: -32002" in second  # an error reply, not a crash

    asyncio.run(scenario())


def test_cancel_of_hang_returns_cancelled(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = RecordingClient()
        async with running_agent(tmp_path, client) as (conn, _):
            sid = await start(conn, tmp_path)
            pending = asyncio.create_task(say(conn, sid, "wait #hang"))
            await wait_until(lambda: "agent_thought_chunk" in client.kinds())
            await conn.cancel(session_id=sid)
            resp = await asyncio.wait_for(pending, 10)
            after = await say(conn, sid, "still alive")
        assert resp.stop_reason == "cancelled"
        assert after.stop_reason == "end_turn"  # the session stays usable

    asyncio.run(scenario())


def test_cancel_abandons_pending_permission(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = RecordingClient(permission="hang")
        async with running_agent(tmp_path, client) as (conn, _):
            sid = await start(conn, tmp_path)
            pending = asyncio.create_task(say(conn, sid, "x #permission"))
            await wait_until(lambda: bool(client.permission_requests))
            await conn.cancel(session_id=sid)
            resp = await asyncio.wait_for(pending, 10)
        assert resp.stop_reason == "cancelled"
        assert "tool_call" not in client.kinds()

    asyncio.run(scenario())


def test_crash_exits_3_and_fails_the_pending_prompt(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = RecordingClient()
        async with running_agent(tmp_path, client) as (conn, proc):
            sid = await start(conn, tmp_path)
            with pytest.raises(ConnectionError):
                await say(conn, sid, "boom #crash")
            assert await asyncio.wait_for(proc.wait(), 10) == 3
        assert client.texts() == ["Echo: "]  # exactly one chunk made it out first

    asyncio.run(scenario())


def test_exit_during_initialize(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_agent(tmp_path, RecordingClient(), "--exit-during-initialize") as (
            conn,
            proc,
        ):
            with pytest.raises(ConnectionError):
                await conn.initialize(protocol_version=PROTOCOL_VERSION)
            assert await asyncio.wait_for(proc.wait(), 10) == 2

    asyncio.run(scenario())


def test_load_after_restart_replays_history_before_answering(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_agent(tmp_path, RecordingClient()) as (conn, _):
            sid = await start(conn, tmp_path)
            await say(conn, sid, "first message")
            await say(conn, sid, "second one #chunks=2")

        wire: list[str] = []

        def tap(event: StreamEvent) -> None:
            if event.direction is StreamDirection.INCOMING:
                msg = event.message
                wire.append(msg.get("method") or f"response:{msg.get('id')}")

        client = RecordingClient()
        async with running_agent(tmp_path, client, observers=[tap]) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            await conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
            replay = [(u.session_update, u.content.text) for u in client.updates]
            load_wire = list(wire)
            client.updates.clear()
            await say(conn, sid, "#history")
        assert replay == [
            ("user_message_chunk", "first message"),
            ("agent_message_chunk", "Echo: first message"),
            ("user_message_chunk", "second one #chunks=2"),
            ("agent_message_chunk", "c0 c1 "),
        ]
        # All four replay notifications precede the load response on the wire.
        assert load_wire[-5:-1] == ["session/update"] * 4
        assert load_wire[-1].startswith("response:")
        assert "history: first message | second one" in client.reply()

    asyncio.run(scenario())


def test_resume_after_restart_attaches_without_replay(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_agent(tmp_path, RecordingClient()) as (conn, _):
            sid = await start(conn, tmp_path)
            await say(conn, sid, "remember me")
        client = RecordingClient()
        async with running_agent(tmp_path, client) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            resumed = await conn.resume_session(session_id=sid, cwd=str(tmp_path))
            assert client.updates == []
            await say(conn, sid, "#history")
            with pytest.raises(RequestError) as unknown:
                await conn.resume_session(session_id="nope", cwd=str(tmp_path))
        assert resumed.modes is not None and resumed.modes.current_mode_id == "default"
        assert "history: remember me" in client.reply()
        assert unknown.value.code == -32002

    asyncio.run(scenario())


def test_no_load_answers_method_not_found(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_agent(tmp_path, RecordingClient(), "--no-load") as (conn, _):
            sid = await start(conn, tmp_path)
            with pytest.raises(RequestError) as err:
                await conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
        assert err.value.code == -32601

    asyncio.run(scenario())


def test_mode_and_model_changes_notify_and_persist(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = RecordingClient()
        async with running_agent(tmp_path, client) as (conn, _):
            sid = await start(conn, tmp_path)
            await conn.set_session_mode(session_id=sid, mode_id="plan")
            resp = await conn.set_config_option(
                config_id="model", session_id=sid, value="example-large"
            )
            listed = await conn.list_sessions()
        assert client.kinds() == ["current_mode_update", "config_option_update"]
        assert resp.config_options[0].current_value == "example-large"
        assert [s.session_id for s in listed.sessions] == [sid]
        stored = json.loads((tmp_path / "state.json").read_text())["sessions"][sid]
        assert (stored["mode"], stored["model"]) == ("plan", "example-large")

    asyncio.run(scenario())


def test_invocations_file_gets_one_line_per_prompt(tmp_path: Path) -> None:
    log = tmp_path / "invocations.jsonl"

    async def scenario() -> tuple[str, int]:
        flags = ("--invocations-file", str(log))
        async with running_agent(tmp_path, RecordingClient(), *flags) as (conn, proc):
            sid = await start(conn, tmp_path)
            for text in ("one", "two #chunks=1", "three"):
                await say(conn, sid, text)
            return sid, proc.pid

    sid, pid = asyncio.run(scenario())
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [entry["message"] for entry in lines] == ["one", "two #chunks=1", "three"]
    assert {(entry["sessionId"], entry["pid"]) for entry in lines} == {(sid, pid)}
