"""``session/fork`` through ``acpctl serve`` in front of the real agents (Claude Code, Codex,
Gemini CLI): the MCP servers the fork's request names are started for the fork's agent,
under serve (when the agent could not fork its own session, after the fork's first prompt,
which it answers)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from .client import RecordingClient
from .conftest import RealAgent
from .cp_helpers import (
    ControlPlaneFiles,
    is_descendant,
    mcp_server_script,
    mcp_starts,
    prompt,
    serve_connection,
    wait_for,
)


@pytest.mark.timeout(180)
def test_a_fork_through_serve_starts_the_mcp_servers_of_its_request(
    real_agent: RealAgent, tmp_path: Path
) -> None:
    cp = ControlPlaneFiles(tmp_path / "cp", real_agent.name)
    cp.write_config(real_agent.launch, by_name=True)
    cwd = real_agent.cwd
    script = mcp_server_script(tmp_path / "mcp_probe.py")
    log = tmp_path / "mcp-fork.log"
    probe: list[dict[str, Any]] = [
        {"name": "probe", "command": sys.executable, "args": [str(script), str(log)], "env": []}
    ]

    async def run() -> dict[str, Any]:
        client = RecordingClient(cwd)
        async with serve_connection(cp, client, cwd) as (conn, proc, _):
            params: dict[str, Any] = {"cwd": str(cwd), "mcpServers": []}
            new = await asyncio.wait_for(conn._conn.send_request("session/new", params), 90)
            sid = new["sessionId"]
            assert (await prompt(conn, sid, "SAY apples")).stop_reason == "end_turn"
            assert mcp_starts(log) == []  # the source was given none
            params = {"sessionId": sid, "cwd": str(cwd), "mcpServers": probe}
            forked = await asyncio.wait_for(conn._conn.send_request("session/fork", params), 90)
            fid = forked["sessionId"]
            assert fid != sid
            if not forked["_meta"]["acpctl"]["agentForked"]:
                # A new agent session: some agents start MCP servers at the first prompt.
                assert (await prompt(conn, fid, "SAY pears")).stop_reason == "end_turn"

            def under_serve() -> list[dict[str, Any]]:
                return [s for s in mcp_starts(log) if is_descendant(s["pid"], proc.pid)]

            started = await asyncio.to_thread(wait_for, under_serve, 30)
            assert started, f"the fork's agent did not start its MCP server: {mcp_starts(log)}"
            assert started[0]["argv"] == [str(script), str(log)]
            meta: dict[str, Any] = forked["_meta"]["acpctl"]
            return meta

    meta = asyncio.run(run())
    assert meta["forkOf"]["turn"] == 1
