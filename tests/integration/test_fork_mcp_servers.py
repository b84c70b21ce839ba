"""A fork's client MCP servers (``ControlPlane.fork``): the source's by default, secrets
included while this process holds them, or the ones the fork is given; known before the
fork's agent starts, and in the store by name only."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.support.cp_harness import example_agent, open_cp
from tests.support.store_contents import stored_bytes

SECRET = "fork-tool-SECRET-0b7a"


def _server(name: str) -> dict[str, Any]:
    """An MCP server a client offers (never started: the example agent lists it)."""
    env = [{"name": "TOOL_TOKEN", "value": SECRET}]
    return {"name": name, "command": sys.executable, "args": ["-c", "pass"], "env": env}


def test_a_fork_has_the_sources_mcp_servers_or_those_it_is_given(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        source = cp.spawn(
            example_agent(tmp_path), tmp_path, "remember apples", mcp_servers=[_server("mine")]
        )
        assert source.command is not None and cp.wait(source.command.id, 60).ok
        sid = source.session.id

        inherited = cp.fork(sid, idempotency_key="inherit").session.id
        given = cp.fork(sid, idempotency_key="given", mcp_servers=[_server("other")]).session.id
        none = cp.fork(sid, idempotency_key="none", mcp_servers=[]).session.id
        listed = {}
        for fid in (inherited, given, none):
            outcome = cp.wait(cp.prompt(fid, "#mcp-servers").id, 60)
            assert outcome.ok
            listed[fid] = outcome.text
        # The secret-bearing server reached each fork's agent at its first start.
        assert "mine" in listed[inherited] and "other" not in listed[inherited]
        assert "other" in listed[given] and "mine" not in listed[given]
        assert "mine" not in listed[none] and "other" not in listed[none]
        assert cp.get(given).metadata["mcpServers"][0]["env"] == [{"name": "TOOL_TOKEN"}]
    stored = stored_bytes(db)
    assert b"TOOL_TOKEN" in stored and SECRET.encode() not in stored
