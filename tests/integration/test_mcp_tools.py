"""The subagent tools as agents use them: the control plane's own HTTP MCP endpoint for agents
that speak HTTP MCP, else a stdio MCP server per session over the bridge's Unix socket; either
way the caller is the process the kernel names, and it must be below the session's agent."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from control_plane.subagents.wire import call_bridge
from protocol.agent.proc_tree import process_start_time
from state_machines import SessionState
from tests.conftest import eventually
from tests.support.cp_harness import example_agent, open_cp
from tests.support.subagent_callers import act_as, post_initialize


# The stdio transport's own behaviour (who may call, refusals) stays in the default run
# (the claiming test below); the three-children flow over it is the full matrix's.
@pytest.mark.parametrize("transport", ["http", pytest.param("stdio", marks=pytest.mark.full)])
def test_agent_spawns_three_children_through_the_mcp_tool_and_gets_each_announce_once(
    tmp_path: Path,
    db: str,
    transport: str,
) -> None:
    flags = () if transport == "http" else ("--no-http-mcp",)
    with open_cp(tmp_path, db=db) as cp:
        parent = cp.spawn(
            example_agent(tmp_path, *flags), tmp_path, "#spawn=alpha_task,beta_task,gamma_task go"
        )
        assert parent.command is not None
        outcome = cp.wait(parent.command.id, 120)
        assert outcome.ok and outcome.text.count("spawn_subagent:") == 3
        pid = parent.session.id
        children = cp.children(pid)
        assert len(children) == 3 and all(c.metadata["mode"] == "run" for c in children)

        def announces() -> list[dict]:  # type: ignore[type-arg]
            return [e.payload for e in cp.events(pid) if e.kind == "announce"]

        eventually(lambda: len(announces()) == 3)
        texts = sorted(a["text"] for a in announces())
        assert texts == ["Echo: alpha task", "Echo: beta task", "Echo: gamma task"]
        follow_ups = [
            c for c in cp.commands(pid) if (c.idempotency_key or "").startswith("announce:")
        ]
        for command in follow_ups:
            assert cp.wait(command.id, 60).ok
        # A mode=run child is closed once its agent has stopped, which may come a moment
        # after its announce: wait for that, then ask through the tool.
        eventually(lambda: all(cp.get(c.id).state is SessionState.CLOSED for c in children))
        listed = cp.wait(cp.prompt(pid, "#list-subagents").id, 60)
        assert listed.ok
        states = {c["state"] for c in json.loads(listed.text.split("list_subagents: ", 1)[1])}
        assert states == {"closed"}  # mode=run children end after their run
        history = cp.wait(cp.prompt(pid, "#history").id, 60).text
        assert history.count("[subagent") == 3  # the parent's conversation continued with them
        assert cp.wait_delivered(30)  # nothing left to deliver, so no fourth is coming
        assert len(announces()) == 3


def test_session_children_take_follow_ups_and_limits_surface_as_tool_errors(
    tmp_path: Path,
    db: str,
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        parent = cp.spawn(example_agent(tmp_path), tmp_path, "#spawn-session=keeper")
        assert parent.command is not None
        out = cp.wait(parent.command.id, 120)
        child = json.loads(out.text.split("spawn_subagent: ", 1)[1].split("}", 1)[0] + "}")["id"]
        sent = cp.wait(
            cp.prompt(parent.session.id, f"#send-subagent={child}:second_question").id, 60
        )
        assert sent.ok and "commandId" in sent.text
        result = cp.wait(cp.prompt(parent.session.id, f"#subagent-result={child}").id, 90)
        assert '"status": "ok"' in result.text and "second question" in result.text
        assert cp.get(child).state is not SessionState.CLOSED  # mode=session stays open
        many = ",".join(f"t{i}" for i in range(5))  # 1 open child + 5 more: the 6th is refused
        refused = cp.wait(cp.prompt(parent.session.id, f"#spawn-session={many}").id, 120)
        assert refused.text.count("max_children") == 1


def test_a_subagent_is_spawned_by_agent_name_and_an_unknown_name_is_a_tool_error(
    tmp_path: Path,
) -> None:
    with open_cp(tmp_path) as cp:
        parent = cp.spawn(example_agent(tmp_path), tmp_path, "#spawn-agent=example:by_name")
        assert parent.command is not None
        out = cp.wait(parent.command.id, 120)
        (child,) = cp.descendants(parent.session.id)
        assert cp.get(child).agent.name == "example-agent", out.text
        assert cp.wait(cp.commands(child)[0].id, 60).ok
        wrong = cp.wait(cp.prompt(parent.session.id, "#spawn-agent=exampel:x").id, 60)
        assert "unknown agent 'exampel'" in wrong.text and "example" in wrong.text, wrong.text
        assert cp.descendants(parent.session.id) == [child]  # nothing spawned


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_an_agent_claiming_another_session_is_refused_and_sees_only_its_own_tree(
    tmp_path: Path, db: str, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    """What a hostile agent tries: the other session's id in the URL (HTTP) or in the stdio
    server's --session argument. The kernel says the caller is A's agent: refused."""
    flags = () if transport == "http" else ("--no-http-mcp",)
    agent = example_agent(tmp_path, *flags)
    with open_cp(tmp_path, db=db) as cp:
        a = cp.spawn(agent, tmp_path, "#mcp-servers").session.id
        b = cp.spawn(agent, tmp_path).session.id
        b_child = cp.spawn(agent, tmp_path, parent=b, announce=False).session.id
        caplog.set_level(logging.WARNING, logger="control_plane.subagents.server")
        posing = cp.wait(cp.prompt(a, f"#mcp-as={b} #list-subagents").id, 60)
        if transport == "http":  # refused at the first request (initialize): no session
            assert "mcp: failed:" in posing.text
        else:  # the stdio server starts; each call it forwards is refused
            assert f"refused: the caller is not session {b}'s agent" in posing.text
        assert b_child not in posing.text
        refusals = [r.getMessage() for r in caplog.records if "refused a call" in r.message]
        assert refusals and all(b in line for line in refusals)
        # A's own tree is A's: empty; B's child is out of reach by id too.
        mine = cp.wait(cp.prompt(a, "#list-subagents").id, 60)
        assert mine.ok and mine.text.endswith("list_subagents: []")
        if transport == "stdio":
            return  # what follows is the bridge's, whichever transport brought the call
        for directive in (
            f"#subagent-result={b_child}",
            f"#cancel-subagent={b_child}",
            f"#send-subagent={b_child}:x",
        ):
            answer = cp.wait(cp.prompt(a, directive).id, 60)
            assert "not a subagent of this session" in answer.text
        assert cp.get(b_child).state is not SessionState.CLOSED
        theirs = cp.wait(cp.prompt(b, "#list-subagents").id, 60)
        assert b_child in theirs.text


def test_a_process_outside_every_agent_tree_is_refused_on_both_transports(
    tmp_path: Path, db: str
) -> None:
    """The test process knows everything an agent was given (the URL, the socket, the
    session id): not enough. No credential exists to copy."""
    with open_cp(tmp_path, db=db) as cp:
        bridge = cp._bridge
        assert bridge is not None and bridge.http is not None
        session = cp.spawn(example_agent(tmp_path), tmp_path, "#mcp-servers")
        assert session.command is not None and cp.wait(session.command.id, 60).ok
        sid = session.session.id
        answer = call_bridge(bridge.path, {"session": sid, "op": "list_subagents", "args": {}})
        assert answer == {"ok": False, "error": f"refused: the caller is not session {sid}'s agent"}
        url = bridge.http.url_for(sid)
        status, _ = post_initialize(url, "outsider")
        assert status == 403
        # The same request from a process that *is* below the session's agent: served.
        act_as(bridge, sid)
        status, body = post_initialize(url, "outsider")
        assert status == 200 and b"acp-control-plane" in body


def test_the_agent_trees_of_ended_sessions_are_dropped(tmp_path: Path) -> None:
    """A long-running control plane binds a tree per agent start: the dead ones go."""
    import subprocess
    import sys

    from control_plane.subagents.peers import SWEEP_EVERY, AgentTrees

    trees = AgentTrees()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    trees.bind("ended", gone.pid, 1)  # a start time no live process has
    me = process_start_time(os.getpid())
    assert me is not None
    for n in range(SWEEP_EVERY - 1):
        trees.bind(f"live-{n % 3}", os.getpid(), me)
    assert trees.roots("live-0") == [os.getpid()]
    assert "ended" not in trees._roots
