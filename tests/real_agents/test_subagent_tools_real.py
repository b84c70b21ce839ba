"""The subagent tools with the real agents (Claude Code, Codex, Gemini CLI): each advertises
``mcpCapabilities.http``, is offered the control plane's own HTTP MCP endpoint, and calls
``spawn_subagent`` there when its (stand-in) model asks; the child runs, its result is
announced to the parent. No process is started for the tools, and nothing any process shows
in ``/proc`` (command lines, environments) lets another process use them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from control_plane import ControlPlane
from state_machines import CommandState
from tests.conftest import eventually
from tests.support.subagent_callers import post_initialize

from .conftest import RealAgent
from .cp_helpers import cmdline, environ, in_process, live_pids

pytestmark = pytest.mark.timeout(240)

MCP_PROCESS = "control_plane.subagents.mcp_server"


def _calls(transport: str, outcome: str) -> float:
    labels = {"transport": transport, "outcome": outcome}
    return REGISTRY.get_sample_value("acpctl_subagent_tool_calls_total", labels) or 0.0


def _proc_strings() -> dict[int, str]:
    """Every other live process's command line and environment, as one string per pid."""
    seen: dict[int, str] = {}
    for pid in live_pids():
        shown = " ".join(cmdline(pid)) + " " + " ".join((environ(pid) or {}).values())
        seen[pid] = shown
    return seen


def _tools(body: object) -> list[dict[str, object]]:
    """The tools a model request offers, in any of the three APIs' shapes."""
    if not isinstance(body, dict):
        return []
    found = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    for group in list(found):  # Gemini's declarations, Codex's namespaces
        found += group.get("functionDeclarations") or group.get("tools") or []
    return found


def test_a_real_agent_spawns_a_subagent_through_the_http_tools(
    real_agent: RealAgent, tmp_path: Path
) -> None:
    settings, spec = in_process(
        real_agent.name, real_agent.launch, tmp_path / "agent-logs", turn_timeout_s=120
    )
    http_ok, stdio_calls = _calls("http", "ok"), _calls("stdio", "ok") + _calls("stdio", "error")
    task = json.dumps({"task": "SAY the child says hello"})
    with ControlPlane.open(tmp_path / "cp.db", settings=settings) as cp:
        bridge = cp._bridge
        assert bridge is not None and bridge.http is not None
        parent = cp.spawn(spec, str(real_agent.cwd), f"TOOL spawn_subagent {task}")
        assert parent.command is not None
        outcome = cp.wait(parent.command.id, 180)
        assert outcome.state is CommandState.COMPLETED, outcome
        children = cp.children(parent.session.id)
        tools = [t.get("name") for r in real_agent.server.requests for t in _tools(r.body)]
        assert len(children) == 1, (outcome.text, sorted({str(t) for t in tools}))
        (child,) = children
        # The tool's answer (the child's id) went back to the model.
        assert child.id in json.dumps([r.body for r in real_agent.server.requests])
        assert _calls("http", "ok") > http_ok
        # The child ran its task on the same agent, and its result came back to the parent.
        eventually(
            lambda: any(e.kind == "announce" for e in cp.events(parent.session.id)), timeout=120
        )
        (announce,) = [e.payload for e in cp.events(parent.session.id) if e.kind == "announce"]
        assert announce["status"] == "ok" and "the child says hello" in announce["text"]

        # No tool process anywhere; and whatever /proc shows of the agents' trees (Claude
        # Code's SDK puts its MCP config on its CLI's command line) is not enough for a
        # process outside them: a replay from here is refused.
        shown = _proc_strings()
        # This control plane's (its socket is under tmp_path): other tests running beside
        # this one on the machine may have stdio tool processes of their own.
        mine = [pid for pid, text in shown.items() if MCP_PROCESS in text and str(tmp_path) in text]
        assert not mine
        pattern = re.compile(rf"http://127\.0\.0\.1:{bridge.http.port}/sessions/[^\s\"',]+/mcp")
        urls = {url for text in shown.values() for url in pattern.findall(text)}
        urls.add(bridge.http.url_for(parent.session.id))
        for url in sorted(urls):
            assert post_initialize(url, "replay")[0] == 403, url
    assert _calls("stdio", "ok") + _calls("stdio", "error") == stdio_calls
