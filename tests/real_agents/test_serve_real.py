"""``acpctl serve`` in front of the real agents (Claude Code, Codex, Gemini CLI): kill -9 during
a tool call, what an editor sees compared with the agent itself, MCP servers, API keys."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.direct_sql import query

from .client import RecordingClient, agent_connection, message_text, update_kinds
from .conftest import RealAgent
from .cp_helpers import (
    API_OF,
    SLOW_TOOL,
    ControlPlaneFiles,
    api_key_of,
    duplicated,
    gone_within,
    is_descendant,
    mcp_server_script,
    mcp_starts,
    prompt,
    serve_connection,
    tool_process,
    turn_starts,
    user_texts,
    wait_for,
)

INTERRUPTED_MARK = "[acpctl: this turn was interrupted"


def _cp(real_agent: RealAgent, tmp_path: Path, db: str | None = None) -> ControlPlaneFiles:
    cp = (
        ControlPlaneFiles(tmp_path / "cp", real_agent.name)
        if db is None
        else ControlPlaneFiles.on(tmp_path / "cp", real_agent.name, db)
    )
    # `serve --agent claude|codex|gemini`: the name resolves through the registry snapshot
    # to the installed package (docs/agents/README.md).
    cp.write_config(real_agent.launch, by_name=True)
    return cp


def _dumped(updates: list[Any], kind: str) -> list[dict[str, Any]]:
    return [
        u.model_dump(by_alias=True, exclude_none=True) for u in updates if u.session_update == kind
    ]


def _event_kinds(cp: ControlPlaneFiles, session_id: str) -> list[str]:
    return [e["kind"] for e in cp.json("events", session_id, "--json")]


def _agent_process(cp: ControlPlaneFiles) -> dict[str, Any] | None:
    rows = query(cp.db, "select agent_process from sessions")
    assert len(rows) == 1, rows
    return json.loads(rows[0][0]) if rows[0][0] else None


@pytest.mark.timeout(120)
def test_kill_9_of_serve_during_a_tool_call(real_agent: RealAgent, tmp_path: Path, db: str) -> None:
    """SIGKILL of serve while the agent's shell command runs: the whole agent tree (also the
    setsid'ed command) is dead within 1 s, the command's side effect never happens; after a
    restart the session loads, takes the next prompt, and the cut-short prompt is never sent
    to the model again. On both backends."""
    cp, cwd, server = _cp(real_agent, tmp_path, db), real_agent.cwd, real_agent.server
    side = cwd / "side.txt"
    client = RecordingClient(cwd)

    async def first() -> tuple[str, str, float]:
        async with serve_connection(cp, client, cwd) as (conn, proc, _):
            new = await asyncio.wait_for(conn.new_session(cwd=str(cwd), mcp_servers=[]), 90)
            turn = asyncio.create_task(prompt(conn, new.session_id, SLOW_TOOL))
            found = await asyncio.to_thread(wait_for, lambda: tool_process(cwd), 60)
            assert found, (turn.done() and turn.result(), update_kinds(client.updates))
            seen_at = time.monotonic()
            assert client.permission_requests, "serve must ask the client before the command"
            # The agent's tool command runs at the default limits.agent_nice (10 steps nicer
            # than serve); the reaper keeps serve's priority.
            reaper_pid = int(found[1].split(".")[0])
            assert os.getpriority(os.PRIO_PROCESS, found[0]) == min(19, os.nice(0) + 10)
            assert os.getpriority(os.PRIO_PROCESS, reaper_pid) == os.nice(0)
            os.kill(proc.pid, signal.SIGKILL)
            gone, elapsed, left = await asyncio.to_thread(gone_within, found[1], 1.0)
            assert gone, f"agent tree still alive {elapsed:.2f}s after kill -9: {left}"
            turn.cancel()
            with contextlib.suppress(BaseException):
                await turn
            return new.session_id, found[1], seen_at

    session_id, marker, seen_at = asyncio.run(first())
    # The store names the killed tree: the marker is "<reaperPid>.<reaperStart>".
    tree = _agent_process(cp)
    assert tree is not None and f"{tree['reaperPid']}.{tree['reaperStart']}" == marker, tree
    time.sleep(max(0.0, seen_at + 4.5 - time.monotonic()))
    assert not side.exists(), "the killed tool command finished its side effect"

    before = len(server.requests)
    second = RecordingClient(cwd)

    async def again() -> None:
        async with serve_connection(cp, second, cwd) as (conn, _proc, _):
            await asyncio.wait_for(
                conn.load_session(cwd=str(cwd), session_id=session_id, mcp_servers=[]), 90
            )
            users = [u["content"]["text"] for u in _dumped(second.updates, "user_message_chunk")]
            assert users == [SLOW_TOOL]
            assert INTERRUPTED_MARK in message_text(second.updates)
            second.clear()
            resp = await prompt(conn, session_id, "SAY after")
            assert resp.stop_reason == "end_turn"

    asyncio.run(again())
    after = [r for r in server.requests[before:] if r.api == API_OF[real_agent.name]]
    assert turn_starts(after, "SAY after"), "the next prompt did not reach the model"
    assert turn_starts(after, SLOW_TOOL) == [], (
        "the interrupted prompt was sent again",
        _event_kinds(cp, session_id),
        [(r.path, r.directive, user_texts(r)[-2:]) for r in after],
    )
    assert duplicated(after, SLOW_TOOL) == []
    assert not side.exists()
    shown = cp.json("sessions", "show", session_id, "--json")
    prompts = [(c["state"], c["attempts"]) for c in shown["commands"] if c["kind"] == "prompt"]
    assert prompts == [("interrupted", 1), ("completed", 1)], shown["commands"]
    kinds = _event_kinds(cp, session_id)
    assert kinds.count("prompt") == 2, kinds  # the cut-short prompt was not delivered again
    if real_agent.name in ("claude", "codex"):  # both resume: the conversation is kept
        assert "context_lost" not in kinds, kinds


def _mcp(script: Path, log: Path) -> list[dict[str, Any]]:
    return [
        {"name": "probe", "command": sys.executable, "args": [str(script), str(log)], "env": []}
    ]


async def _wait_commands(client: RecordingClient, timeout: float = 15) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _dumped(client.updates, "available_commands_update")
        if found:
            return found
        await asyncio.sleep(0.05)
    return []


async def _mcp_started_under(log: Path, pid: int, timeout: float = 20) -> list[dict[str, Any]]:
    """The MCP probe's start records of processes (still alive) under process ``pid``."""

    def under() -> list[dict[str, Any]]:
        return [s for s in mcp_starts(log) if is_descendant(s["pid"], pid)]

    return await asyncio.to_thread(wait_for, under, timeout)


@pytest.mark.timeout(150)
def test_serve_answers_like_the_agent_and_passes_mcp_servers(
    real_agent: RealAgent, tmp_path: Path
) -> None:
    """What an editor sees: the raw ``session/new`` answer (minus sessionId) and the
    ``available_commands_update`` are the same directly and through serve; the client's MCP
    server is started by the agent directly, through serve, and again after kill -9 of serve,
    a restart and ``session/load`` with the same ``mcpServers``."""
    cp, cwd = _cp(real_agent, tmp_path), real_agent.cwd
    script = mcp_server_script(tmp_path / "mcp_probe.py")
    logs = {k: tmp_path / f"mcp-{k}.log" for k in ("direct", "serve", "reload")}

    async def direct() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        client = RecordingClient(cwd)
        async with agent_connection(real_agent.launch, client, cwd) as (conn, proc, _):
            params = {"cwd": str(cwd), "mcpServers": _mcp(script, logs["direct"])}
            new = await asyncio.wait_for(conn._conn.send_request("session/new", params), 60)
            commands = await _wait_commands(client)
            started = await _mcp_started_under(logs["direct"], proc.pid)
            assert started, f"the agent did not start the MCP server: {mcp_starts(logs['direct'])}"
            return new, commands

    async def served() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        client = RecordingClient(cwd)
        async with serve_connection(cp, client, cwd) as (conn, proc, _):
            params = {"cwd": str(cwd), "mcpServers": _mcp(script, logs["serve"])}
            new = await asyncio.wait_for(conn._conn.send_request("session/new", params), 90)
            commands = await _wait_commands(client)
            started = await _mcp_started_under(logs["serve"], proc.pid)
            assert started, f"no MCP server under serve: {mcp_starts(logs['serve'])}"
            assert started[0]["argv"] == [str(script), str(logs["serve"])]
            os.kill(proc.pid, signal.SIGKILL)
            # the MCP server is part of the agent's tree: it dies with it
            pids = [s["pid"] for s in started]
            dead = await asyncio.to_thread(
                wait_for, lambda: not any(os.path.exists(f"/proc/{p}/stat") for p in pids), 1.0
            )
            assert dead, f"MCP server {pids} outlived kill -9 of serve"
            return new, commands

    direct_new, direct_commands = asyncio.run(direct())
    serve_new, serve_commands = asyncio.run(served())
    session_id = serve_new.pop("sessionId")
    direct_new.pop("sessionId")
    expected_keys = {
        "claude": {"modes", "models", "configOptions"},
        "codex": {"configOptions"},
        "gemini": {"modes", "models"},
    }[real_agent.name]
    assert expected_keys <= set(direct_new), sorted(direct_new)
    assert serve_new == direct_new
    assert len(direct_commands) == 1 and direct_commands[0]["availableCommands"]
    assert serve_commands == direct_commands

    async def reload() -> None:
        client = RecordingClient(cwd)
        async with serve_connection(cp, client, cwd) as (conn, proc, _):
            params = {
                "cwd": str(cwd),
                "sessionId": session_id,
                "mcpServers": _mcp(script, logs["reload"]),
            }
            loaded = await asyncio.wait_for(conn._conn.send_request("session/load", params), 90)
            assert _dumped(client.updates, "available_commands_update")[:1] == direct_commands
            for key in expected_keys:  # what the agent offers, as it said it
                assert loaded.get(key) == direct_new[key], key
            resp = await prompt(conn, session_id, "SAY again")
            assert resp.stop_reason == "end_turn"
            started = await _mcp_started_under(logs["reload"], proc.pid)
            assert started, f"no MCP server after restart + load: {mcp_starts(logs['reload'])}"

    asyncio.run(reload())


def _leaks(secret: str, cp: ControlPlaneFiles, session_id: str, tmp_path: Path) -> list[str]:
    """Where ``secret`` shows up in the store and in what acpctl prints about the session."""
    found = [name for name, content in cp.store_contents() if secret.encode() in content]
    export = tmp_path / f"export-{uuid.uuid4().hex[:6]}.jsonl"
    for args in (
        ("events", session_id, "--json"),
        ("sessions", "show", session_id, "--json"),
        ("sessions", "export", session_id, "-o", str(export)),
    ):
        done = cp.run(*args)
        assert done.returncode == 0, (args, done.stderr)
        if secret in done.stdout or secret in done.stderr:
            found.append(" ".join(args))
    if secret in export.read_text():
        found.append(f"export file {export}")
    # the control plane's own logs of the agents' stderr
    assert cp.agent_logs.is_dir(), cp.agent_logs  # the logs were looked at where they are
    for log in cp.agent_logs.glob("*"):
        if log.is_file() and secret.encode() in log.read_bytes():
            found.append(str(log))
    return found


@pytest.mark.timeout(120)
def test_api_key_is_never_stored_and_a_rotated_key_reaches_the_next_launch(
    real_agent: RealAgent, tmp_path: Path, db: str
) -> None:
    server, cwd, api = real_agent.server, real_agent.cwd, API_OF[real_agent.name]
    old, new = f"sk-old-{uuid.uuid4().hex}", f"sk-new-{uuid.uuid4().hex}"
    cp = ControlPlaneFiles.on(tmp_path / "cp", real_agent.name, db)
    cp.write_config(real_agent.relaunch(api_key=old))
    server.require_key = old

    async def first() -> str:
        async with serve_connection(cp, RecordingClient(cwd), cwd) as (conn, _proc, _):
            sid = await asyncio.wait_for(conn.new_session(cwd=str(cwd), mcp_servers=[]), 90)
            resp = await prompt(conn, sid.session_id, "SAY with the old key")
            assert resp.stop_reason == "end_turn"
            return sid.session_id

    session_id = asyncio.run(first())
    assert {api_key_of(r) for r in server.requests_for(api) if api_key_of(r)} == {old}

    # Rotate: the server now refuses the old key; only the config file changes.
    server.require_key = new
    cp.write_config(real_agent.relaunch(api_key=new))
    before = len(server.requests_for(api))
    client = RecordingClient(cwd)

    async def second() -> list[str]:
        # ``acpctl serve --config C --db D --agent NAME``: the options after the subcommand
        async with serve_connection(cp, client, cwd, options_after=True) as (conn, _proc, _):
            await asyncio.wait_for(
                conn.load_session(cwd=str(cwd), session_id=session_id, mcp_servers=[]), 90
            )
            client.clear()
            resp = await prompt(conn, session_id, "SAY with the new key")
            assert resp.stop_reason == "end_turn"
            assert "with the new key" in message_text(client.updates)
            # while serve runs (SQLite: the -wal and -shm files exist too)
            return [
                name
                for name, content in cp.store_contents()
                for k in (old, new)
                if k.encode() in content
            ]

    live_leaks = asyncio.run(second())
    keys = {api_key_of(r) for r in server.requests_for(api)[before:] if api_key_of(r)}
    assert keys == {new}, keys
    assert live_leaks == []
    for secret in (old, new):
        assert _leaks(secret, cp, session_id, tmp_path) == []
