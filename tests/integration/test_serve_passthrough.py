"""Through `acpctl serve` an editor sees what it sees talking to the agent directly: what
``session/new`` offers (modes, config options), the slash commands that follow it, the MCP
servers it passes, and the agent's own errors (-32000 authentication required); also after a
kill -9 of serve and a ``session/load``."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from acp import PROTOCOL_VERSION, Client, RequestError, spawn_agent_process, text_block
from acp.meta import AGENT_METHODS
from acp.schema import ClientCapabilities

from tests.support.direct_sql import is_postgres
from tests.support.store_contents import stored_bytes

SECRET = "tool-token-SECRET-81c2"


def _agent(tmp: Path, *flags: str) -> list[str]:
    state = tmp / "agent-state.json"
    return [sys.executable, "-m", "protocol.example_agent", "--state-file", str(state), *flags]


def _serve(tmp: Path, db: str, *flags: str) -> list[str]:
    agent = " ".join(_agent(tmp, *flags))
    return [sys.executable, "-m", "control_plane.cli", "serve", "--db", db, "--agent", agent]


def _tools_server(tmp: Path) -> dict[str, Any]:
    """An MCP server the editor offers (never started here: the agent only lists it)."""
    return {
        "name": "my-tools",
        "command": sys.executable,
        "args": ["-c", "pass"],
        "env": [{"name": "TOOL_TOKEN", "value": SECRET}],
    }


class Editor:
    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append(update.model_dump(by_alias=True, exclude_none=True))

    async def request_permission(self, *_: Any, **__: Any) -> Any:
        raise RequestError.method_not_found("session/request_permission")

    def slash_commands(self) -> list[Any]:
        return [
            u["availableCommands"]
            for u in self.updates
            if u["sessionUpdate"] == "available_commands_update"
        ]

    def text(self) -> str:
        return "".join(
            u["content"].get("text", "")
            for u in self.updates
            if u["sessionUpdate"] == "agent_message_chunk"
        )


def _env(tmp: Path) -> dict[str, str]:
    (tmp / "none.toml").write_text("")
    return {
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "PATH": os.environ.get("PATH", ""),
        "ACPCTL_CONFIG": str(tmp / "none.toml"),
        "HOME": str(tmp),
    }


async def _drive(argv: list[str], tmp: Path, body: Any) -> Any:
    editor = Editor()
    with (tmp / "stderr.log").open("ab") as log:
        # Editor is duck-typed: it answers only the callbacks used, not all of acp.Client.
        async with spawn_agent_process(
            cast(Client, editor),
            argv[0],
            *argv[1:],
            env=_env(tmp),
            cwd=str(tmp),
            transport_kwargs={"stderr": log.fileno(), "shutdown_timeout": 5},
        ) as (conn, proc):
            init = await conn.initialize(
                protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities()
            )
            return await body(conn, proc, init, editor)


async def _raw(conn: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A request's answer as sent (the SDK's typed answer drops fields it does not know)."""
    answer: dict[str, Any] = await conn._conn.send_request(method, params)
    return answer


async def _settle(editor: Editor, kind: str, timeout: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not any(u["sessionUpdate"] == kind for u in editor.updates):
        assert asyncio.get_running_loop().time() < deadline, f"no {kind} arrived"
        await asyncio.sleep(0.02)


def _one_session(tmp: Path) -> Any:
    async def body(conn: Any, proc: Any, init: Any, editor: Editor) -> dict[str, Any]:
        new = await _raw(
            conn,
            AGENT_METHODS["session_new"],
            {"cwd": str(tmp), "mcpServers": [_tools_server(tmp)]},
        )
        await _settle(editor, "available_commands_update")
        answer = await conn.prompt(session_id=new["sessionId"], prompt=[text_block("#mcp-servers")])
        return {
            "new": {k: v for k, v in new.items() if k != "sessionId"},
            "slash": editor.slash_commands(),
            "text": editor.text(),
            "stop": answer.stop_reason,
        }

    return body


@pytest.mark.timeout(120)
def test_serve_offers_what_the_agent_offers_directly(tmp_path: Path, db: str) -> None:
    direct_dir, serve_dir = tmp_path / "direct", tmp_path / "serve"
    direct_dir.mkdir()
    serve_dir.mkdir()
    direct = asyncio.run(_drive(_agent(direct_dir), direct_dir, _one_session(direct_dir)))
    served = asyncio.run(_drive(_serve(serve_dir, db), serve_dir, _one_session(serve_dir)))
    assert direct["new"]["modes"]["availableModes"]  # the example agent offers modes ...
    assert direct["new"]["configOptions"]  # ... and config options
    assert served["new"] == direct["new"]
    assert served["slash"] == direct["slash"] != []
    assert "my-tools" in direct["text"] and "my-tools" in served["text"]
    assert served["stop"] == direct["stop"] == "end_turn"
    stored = stored_bytes(db)
    assert b"TOOL_TOKEN" in stored and SECRET.encode() not in stored


@pytest.mark.timeout(120)
def test_after_kill_9_load_returns_the_setup_and_the_editors_mcp_servers_reach_the_agent(
    tmp_path: Path, db: str
) -> None:
    async def first(conn: Any, proc: Any, init: Any, editor: Editor) -> tuple[str, Any]:
        new = await _raw(
            conn,
            AGENT_METHODS["session_new"],
            {"cwd": str(tmp_path), "mcpServers": [_tools_server(tmp_path)]},
        )
        await conn.prompt(session_id=new["sessionId"], prompt=[text_block("hello")])
        proc.send_signal(signal.SIGKILL)
        return new["sessionId"], {k: v for k, v in new.items() if k != "sessionId"}

    sid, setup = asyncio.run(_drive(_serve(tmp_path, db), tmp_path, first))

    async def second(conn: Any, proc: Any, init: Any, editor: Editor) -> tuple[Any, str]:
        loaded = await _raw(
            conn,
            AGENT_METHODS["session_load"],
            {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": [_tools_server(tmp_path)]},
        )
        assert editor.slash_commands(), "the replay carries the slash commands"
        editor.updates.clear()
        await conn.prompt(session_id=sid, prompt=[text_block("#mcp-servers")])
        return loaded, editor.text()

    loaded, text = asyncio.run(_drive(_serve(tmp_path, db), tmp_path, second))
    assert loaded == setup
    assert "my-tools" in text


@pytest.mark.timeout(120)
def test_an_agents_authentication_error_reaches_the_editor_unchanged(
    tmp_path: Path, db: str
) -> None:
    async def body(conn: Any, proc: Any, init: Any, editor: Editor) -> Any:
        try:
            await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        except RequestError as exc:
            return init.auth_methods, exc.to_error_obj()
        raise AssertionError("session/new was accepted")

    flags = ("--auth-required",)
    direct = asyncio.run(_drive(_agent(tmp_path, *flags), tmp_path, body))
    served = asyncio.run(_drive(_serve(tmp_path, db, *flags), tmp_path, body))
    assert direct[1]["code"] == -32000
    assert served[1] == direct[1]
    assert [m.id for m in served[0]] == [m.id for m in direct[0]] == ["token"]


@pytest.mark.timeout(120)
def test_authenticate_reaches_the_agent_and_later_sessions_are_logged_in(
    tmp_path: Path, db: str
) -> None:
    """An editor that gets -32000 logs in with one of the advertised methods: serve carries
    ``authenticate`` to a backend agent process, and the next ``session/new`` works."""

    async def body(conn: Any, proc: Any, init: Any, editor: Editor) -> Any:
        with pytest.raises(RequestError) as refused:
            await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        assert refused.value.code == -32000
        with pytest.raises(RequestError) as unknown:
            await conn.authenticate(method_id="no-such-method")
        assert unknown.value.code == -32602  # the agent's own answer, unchanged
        await conn.authenticate(method_id=init.auth_methods[0].id)
        new = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        answer = await conn.prompt(session_id=new.session_id, prompt=[text_block("hello")])
        return answer.stop_reason, editor.text()

    stop, text = asyncio.run(_drive(_serve(tmp_path, db, "--auth-required"), tmp_path, body))
    assert stop == "end_turn" and "hello" in text


@pytest.mark.timeout(120)
def test_the_first_session_takes_the_agent_serve_started_ahead(tmp_path: Path, db: str) -> None:
    """serve spawns its backend before it imports the SDK or opens the store; the first
    ``session/new`` in serve's cwd adopts that process instead of starting another."""

    async def body(conn: Any, proc: Any, init: Any, editor: Editor) -> str:
        new = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        await conn.prompt(session_id=new.session_id, prompt=[text_block("hello")])
        return str(new.session_id)

    sid = asyncio.run(_drive(_serve(tmp_path, db), tmp_path, body))
    # Beside a store file; with PostgreSQL, in the data directory of serve's $HOME (_env).
    logs_dir = tmp_path / ".local/share/acpctl" if is_postgres(db) else tmp_path
    logs = sorted(p.name for p in (logs_dir / "agent-logs").iterdir())
    # The adopted agent wrote to serve's own log; no launch of the session's own happened.
    assert f"{sid}.stderr.log" not in logs
    assert any(name.startswith("serve-") for name in logs), logs


@pytest.mark.timeout(120)
def test_session_new_refuses_a_missing_cwd_and_a_reused_key_with_invalid_params(
    tmp_path: Path, db: str
) -> None:
    other = tmp_path / "other"
    other.mkdir()

    async def body(conn: Any, proc: Any, init: Any, editor: Editor) -> list[int]:
        codes = []
        for cwd, key in ((tmp_path / "missing", "a"), (tmp_path, "k"), (other, "k")):
            params = {"cwd": str(cwd), "mcpServers": [], "_meta": {"idempotencyKey": key}}
            try:
                await _raw(conn, AGENT_METHODS["session_new"], params)
                codes.append(0)
            except RequestError as exc:
                codes.append(exc.code)
        return codes

    codes = asyncio.run(_drive(_serve(tmp_path, db), tmp_path, body))
    # A cwd that does not exist, refused before anything is spawned; the key's first use
    # works; the same key with another cwd is the client's mistake, not an internal error.
    assert codes == [-32602, 0, -32602]
