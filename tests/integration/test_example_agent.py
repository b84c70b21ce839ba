"""The example agent driven as a real subprocess over stdio with the official ACP SDK client."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

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

from protocol.example_agent.state import StateFile

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(30)


class RecordingClient:
    """A duck-typed ACP client that records everything and serves an in-memory filesystem."""

    def __init__(self, permission: str = "allow") -> None:
        self.updates: list[Any] = []
        self.slash_commands: list[Any] = []
        self.permission_requests: list[dict[str, Any]] = []
        self.permission = permission
        self.files: dict[str, str] = {}
        self.reads: list[tuple[str, int | None, int | None]] = []

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        if update.session_update == "available_commands_update":
            self.slash_commands.append(update)  # after each session/new, load and resume
            return
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
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **_: Any,
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
            cast(Any, client),  # duck-typed: the Client Protocol's stubs would answer null
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


# Each agent start costs ~1.3 s (importing acp.schema dominates), so related checks
# share one process to keep this file well under 30 s.


def test_initialize_advertises_identity_and_capabilities(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_agent(tmp_path, RecordingClient()) as (conn, _):
            init = await conn.initialize(protocol_version=PROTOCOL_VERSION)
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

    asyncio.run(scenario())


def test_no_load_and_no_resume_drop_capabilities_and_answer_method_not_found(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        flags = ("--no-load", "--no-resume")
        async with running_agent(tmp_path, RecordingClient(), *flags) as (conn, _):
            init = await conn.initialize(protocol_version=PROTOCOL_VERSION)
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            with pytest.raises(RequestError) as load_err:
                await conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
            with pytest.raises(RequestError) as resume_err:
                await conn.resume_session(session_id=sid, cwd=str(tmp_path))
        caps = init.agent_capabilities
        assert caps is not None and caps.session_capabilities is not None
        assert caps.load_session is False
        assert caps.session_capabilities.resume is None
        assert (load_err.value.code, resume_err.value.code) == (-32601, -32601)

    asyncio.run(scenario())


def test_default_echo_and_hundred_chunks_stream_in_order(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = RecordingClient()
        async with running_agent(tmp_path, client) as (conn, _):
            sid = await start(conn, tmp_path)
            echo = await say(conn, sid, "hello brave world")
            echo_kinds, echo_texts = client.kinds(), client.texts()
            client.updates.clear()
            counted = await say(conn, sid, "#chunks=100")
        # Default turn: one thought chunk first, then the echo one word per chunk.
        assert echo_kinds[0] == "agent_thought_chunk"
        assert echo_kinds.count("agent_thought_chunk") == 1
        assert echo_texts == ["Echo: ", "hello ", "brave ", "world"]
        assert echo.stop_reason == "end_turn"
        assert echo.usage is not None
        assert (echo.usage.input_tokens, echo.usage.output_tokens) == (3, 4)
        assert echo.usage.total_tokens == 7
        assert client.texts() == [f"c{i} " for i in range(100)]
        assert counted.usage is not None and counted.usage.output_tokens == 100

    asyncio.run(scenario())


def test_stamp_ends_each_chunk_with_the_agents_monotonic_send_time(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, list[str], int]:
        client = RecordingClient()
        async with running_agent(tmp_path, client) as (conn, _):
            sid = await start(conn, tmp_path)
            before = time.monotonic_ns()
            await say(conn, sid, "#chunks=3 #stamp")
            return before, client.texts(), time.monotonic_ns()

    before, texts, after = asyncio.run(scenario())
    # CLOCK_MONOTONIC is one clock for every process of the machine: the agent's stamps fall
    # inside the turn as this process timed it, in send order.
    stamps = [text.rstrip().split("@") for text in texts]
    assert [label for label, _ in stamps] == ["c0", "c1", "c2"]
    sent = [int(ns) for _, ns in stamps]
    assert before <= sent[0] <= sent[1] <= sent[2] <= after


def test_tool_call_with_permission_allowed_then_rejected(tmp_path: Path) -> None:
    async def turn(conn: ClientSideConnection, sid: str, client: RecordingClient) -> list[Any]:
        client.updates.clear()
        await say(conn, sid, "look #tool #permission")
        return [u for u in client.updates if u.session_update.startswith("tool_call")]

    async def scenario() -> None:
        client = RecordingClient(permission="allow")
        async with running_agent(tmp_path, client) as (conn, _):
            sid = await start(conn, tmp_path)
            allowed = await turn(conn, sid, client)
            allowed_reply = client.reply()
            client.permission = "reject"
            rejected = await turn(conn, sid, client)
            rejected_reply = client.reply()
        first = client.permission_requests[0]
        assert [(o.option_id, o.kind) for o in first["options"]] == [
            ("allow", "allow_once"),
            ("reject", "reject_once"),
        ]
        assert allowed[0].tool_call_id == first["tool_call"].tool_call_id == "tool-1"
        assert (allowed[0].title, allowed[0].kind) == ("echo-tool", "read")
        assert allowed[0].raw_input == {"message": "look"}
        assert [u.status for u in allowed] == ["pending", "in_progress", "completed"]
        assert allowed[-1].content[0].content.text == "tool output: look"
        assert "permission: allowed" in allowed_reply
        assert [u.status for u in rejected] == ["pending", "failed"]
        assert rejected[0].tool_call_id == "tool-2"
        assert "permission: rejected" in rejected_reply

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


def test_cancel_stops_hang_and_abandons_pending_permission(tmp_path: Path) -> None:
    async def cancel_turn(conn: ClientSideConnection, sid: str, text: str, ready: Any) -> Any:
        pending = asyncio.create_task(say(conn, sid, text))
        await wait_until(ready)
        await conn.cancel(session_id=sid)
        return await asyncio.wait_for(pending, 10)

    async def scenario() -> None:
        client = RecordingClient(permission="hang")
        async with running_agent(tmp_path, client) as (conn, _):
            sid = await start(conn, tmp_path)
            hang = await cancel_turn(
                conn, sid, "wait #hang", lambda: "agent_thought_chunk" in client.kinds()
            )
            client.updates.clear()
            perm = await cancel_turn(
                conn, sid, "x #permission", lambda: bool(client.permission_requests)
            )
            perm_kinds = client.kinds()
            after = await say(conn, sid, "still alive")
            client.updates.clear()
            hard = asyncio.create_task(say(conn, sid, "#hang-hard"))
            await wait_until(lambda: "agent_thought_chunk" in client.kinds())
            await conn.cancel(session_id=sid)
            # A prompt sent after the cancel is refused because the first one still runs:
            # the agent read and handled the cancel (stdin order) and ignored it.
            with pytest.raises(RequestError) as refused:
                await say(conn, sid, "after the cancel")
            assert refused.value.data == {"details": "a prompt is already running"}
            assert not hard.done()  # #hang-hard ignores session/cancel
        # Leaving the block closed stdin: the agent exits and the stuck prompt fails.
        with pytest.raises(ConnectionError):
            await hard
        assert hang.stop_reason == "cancelled"
        assert perm.stop_reason == "cancelled"
        assert "tool_call" not in perm_kinds  # the abandoned permission never ran the tool
        assert after.stop_reason == "end_turn"  # the session stays usable

    asyncio.run(scenario())


def test_crash_exits_3_after_recording_every_invocation(tmp_path: Path) -> None:
    log = tmp_path / "invocations.jsonl"

    async def scenario() -> tuple[str, int]:
        client = RecordingClient()
        flags = ("--invocations-file", str(log))
        async with running_agent(tmp_path, client, *flags) as (conn, proc):
            sid = await start(conn, tmp_path)
            await say(conn, sid, "one")
            await say(conn, sid, "two #chunks=1")
            client.updates.clear()
            with pytest.raises(ConnectionError):
                await say(conn, sid, "boom #crash")
            assert await asyncio.wait_for(proc.wait(), 10) == 3
        assert client.texts() == ["Echo: "]  # exactly one chunk made it out first
        return sid, proc.pid

    sid, pid = asyncio.run(scenario())
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [entry["message"] for entry in lines] == ["one", "two #chunks=1", "boom #crash"]
    assert {(entry["sessionId"], entry["pid"]) for entry in lines} == {(sid, pid)}


def test_exit_during_initialize(tmp_path: Path) -> None:
    async def scenario() -> None:
        flag = "--exit-during-initialize"
        async with running_agent(tmp_path, RecordingClient(), flag) as (conn, proc):
            with pytest.raises(ConnectionError):
                await conn.initialize(protocol_version=PROTOCOL_VERSION)
            assert await asyncio.wait_for(proc.wait(), 10) == 2

    asyncio.run(scenario())


def test_restart_load_replays_history_and_resume_attaches_silently(tmp_path: Path) -> None:
    wire: list[str] = []

    def tap(event: StreamEvent) -> None:
        if event.direction is StreamDirection.INCOMING:
            msg = event.message
            update = (msg.get("params") or {}).get("update") or {}
            if update.get("sessionUpdate") == "available_commands_update":
                wire.append("commands")
                return
            wire.append(msg.get("method") or f"response:{msg.get('id')}")

    async def first_process() -> tuple[str, str]:
        async with running_agent(tmp_path, RecordingClient()) as (conn, _):
            loaded = await start(conn, tmp_path)
            await say(conn, loaded, "first message")
            await say(conn, loaded, "second one #chunks=2")
            resumed = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            await say(conn, resumed, "remember me")
        return loaded, resumed

    async def second_process(loaded: str, resumed: str) -> None:
        client = RecordingClient()
        async with running_agent(tmp_path, client, observers=[tap]) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            await conn.load_session(cwd=str(tmp_path), session_id=loaded, mcp_servers=[])
            replay = [(u.session_update, u.content.text) for u in client.updates]
            load_wire = list(wire)
            client.updates.clear()
            await say(conn, loaded, "#history")
            loaded_reply = client.reply()
            client.updates.clear()
            await conn.resume_session(session_id=resumed, cwd=str(tmp_path))
            resume_updates = list(client.updates)
            await say(conn, resumed, "#history")
            with pytest.raises(RequestError) as unknown:
                await conn.resume_session(session_id="nope", cwd=str(tmp_path))
        assert replay == [
            ("user_message_chunk", "first message"),
            ("agent_message_chunk", "Echo: first message"),
            ("user_message_chunk", "second one #chunks=2"),
            ("agent_message_chunk", "c0 c1 "),
        ]
        # All four replay notifications precede the load response on the wire; the slash
        # commands follow it.
        load_part = [w for w in load_wire if w != "commands"]
        assert load_part[-5:] == ["session/update"] * 4 + ["response:1"]
        assert wire.index("commands") > wire.index("response:1")
        assert "history: first message | second one" in loaded_reply
        assert resume_updates == []
        assert "history: remember me" in client.reply()
        assert unknown.value.code == -32002

    asyncio.run(second_process(*asyncio.run(first_process())))


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
        stored = StateFile(tmp_path / "state.json").get(sid)
        assert stored is not None
        assert (stored.mode, stored.model) == ("plan", "example-large")

    asyncio.run(scenario())


def test_misbehaviour_directives_leave_the_connection_usable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw_kinds: list[str] = []

    def tap(event: StreamEvent) -> None:
        params = event.message.get("params") or {}
        if event.direction is StreamDirection.INCOMING and "update" in params:
            raw_kinds.append(params["update"]["sessionUpdate"])

    async def scenario() -> None:
        client = RecordingClient()
        async with running_agent(tmp_path, client, observers=[tap]) as (conn, _):
            sid = await start(conn, tmp_path)
            text = (
                "#garbage #flood-stderr=1048576 #oversize=200000 #unknown-update "
                "#plan #title=My_Title #updates=3"
            )
            resp = await say(conn, sid, text)
            after = await say(conn, sid, "ok")
        assert resp.stop_reason == after.stop_reason == "end_turn"
        # #updates: no thought chunk, chunk texts are indexes (after the oversize one).
        assert client.texts()[:4] == ["x" * 200000, "0", "1", "2"]
        plan = next(u for u in client.updates if u.session_update == "plan")
        assert len(plan.entries) == 2
        info = next(u for u in client.updates if u.session_update == "session_info_update")
        assert info.title == "My Title"
        # The SDK drops the vendor update before session_update; only the raw tap sees it.
        assert "vendor_example_kind" in raw_kinds
        assert "vendor_example_kind" not in client.kinds()
        assert (tmp_path / "agent.stderr").stat().st_size >= 1048576
        # The #garbage line reached the client, which logged and skipped it.
        assert any("Error parsing JSON-RPC" in r.getMessage() for r in caplog.records)

    asyncio.run(scenario())


def test_without_a_state_file_the_agent_leaves_nothing_in_its_cwd(tmp_path: Path) -> None:
    """Its sessions go to the user's state directory: an agent started in a project must not
    leave files in the project."""
    import os
    import subprocess

    project, state_home = tmp_path / "project", tmp_path / "state"
    project.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "EXAMPLE_AGENT_STATE"}
    env["XDG_STATE_HOME"] = str(state_home)
    frames = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "session/new",
            "params": {"cwd": str(project), "mcpServers": []},
        },
    ]
    done = subprocess.run(
        [sys.executable, "-m", "protocol.example_agent"],
        input="".join(json.dumps(f) + "\n" for f in frames),
        capture_output=True,
        text=True,
        cwd=project,
        env=env,
        timeout=60,
    )
    answers = [json.loads(line) for line in done.stdout.splitlines() if '"id"' in line]
    assert any(a.get("id") == 2 and "sessionId" in a.get("result", {}) for a in answers), done
    assert list(project.iterdir()) == []
    assert (state_home / "acpctl" / "example-agent-sessions.json").exists()
