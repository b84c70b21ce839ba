"""ACP ``session/fork`` through ``acpctl serve``: a real serve subprocess driven by the SDK's
client over stdio, in front of the example agent with and without its own ``session/fork``."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp import Client as AcpClient
from acp.schema import ClientCapabilities, EnvVariable, McpServerStdio

from tests.support.store_contents import stored_bytes

SECRET = "fork-tool-SECRET-5d1e"


class Client:
    def __init__(self) -> None:
        self.chunks: dict[str, list[str]] = {}

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        dumped = update.model_dump(by_alias=True, exclude_none=True)
        if dumped.get("sessionUpdate") == "agent_message_chunk":
            self.chunks.setdefault(session_id, []).append(dumped["content"].get("text", ""))

    def text(self, session_id: str) -> str:
        return "".join(self.chunks.pop(session_id, []))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("agent_forks", [True, False])
def test_session_fork_through_serve(tmp_path: Path, db: str, agent_forks: bool) -> None:
    """The fork has the conversation up to the source's last turn: copied by the agent's
    own ``session/fork`` when it has one, else sent with the fork's first prompt; the
    source goes on unchanged; ``_meta.acpctl`` says which way it went; the MCP servers the
    fork's request names reach its agent, and the store by name only."""
    agent = f"{sys.executable} -m protocol.example_agent --state-file {tmp_path / 'state.json'}"
    if agent_forks:
        agent += " --fork"
    argv = ["-m", "control_plane.cli", "--db", db, "serve", "--agent", agent]
    (tmp_path / "none.toml").write_text("")
    env = {
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "ACPCTL_CONFIG": str(tmp_path / "none.toml"),
        "HOME": str(tmp_path),
    }
    tools = McpServerStdio(
        name="fork-tools",
        command=sys.executable,
        args=["-c", "pass"],
        env=[EnvVariable(name="FORK_TOOL_TOKEN", value=SECRET)],
    )
    client = Client()

    async def run() -> None:
        with (tmp_path / "serve.log").open("ab") as log:
            async with spawn_agent_process(
                cast(AcpClient, client),
                sys.executable,
                *argv,
                env=env,
                cwd=str(tmp_path),
                transport_kwargs={"stderr": log.fileno(), "shutdown_timeout": 5},
            ) as (conn, _proc):
                init = await conn.initialize(
                    protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities()
                )
                caps = init.agent_capabilities
                assert caps is not None and caps.session_capabilities is not None
                assert caps.session_capabilities.fork is not None
                sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
                await conn.prompt(session_id=sid, prompt=[text_block("remember apples")])
                client.text(sid)
                forked = await conn.fork_session(
                    session_id=sid, cwd=str(tmp_path), mcp_servers=[tools]
                )
                fid = forked.session_id
                assert fid != sid
                meta = (forked.field_meta or {})["acpctl"]
                assert meta["forkOf"] == {"session": sid, "turn": 1}
                assert meta["agentForked"] is agent_forks and meta["seeded"] is not agent_forks
                await conn.prompt(session_id=fid, prompt=[text_block("#history then pears")])
                history = client.text(fid)
                assert "apples" in history, history  # the fork knows the conversation
                await conn.prompt(session_id=sid, prompt=[text_block("#history and plums")])
                assert "pears" not in client.text(sid)  # the source never saw the fork's
                # The fork's agent started with the servers its request named, secrets and
                # all (known before the fork could be seen: docs/workspaces.md).
                await conn.prompt(session_id=fid, prompt=[text_block("#mcp-servers")])
                assert "fork-tools" in client.text(fid)

    asyncio.run(asyncio.wait_for(run(), 100))
    stored = stored_bytes(db)
    assert b"FORK_TOOL_TOKEN" in stored and SECRET.encode() not in stored
