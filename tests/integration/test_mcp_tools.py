"""The subagent tools as real agents use them: an MCP server per session (stdio, the official
`mcp` SDK) reaching the control plane over a Unix socket with a per-session secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from control_plane.subagents.wire import call_bridge
from state_machines import SessionState
from tests.conftest import eventually
from tests.support.cp_harness import example_agent, open_cp


def test_agent_spawns_three_children_through_the_mcp_tool_and_gets_each_announce_once(
    tmp_path: Path,
    db: str,
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        parent = cp.spawn(
            example_agent(tmp_path), tmp_path, "#spawn=alpha_task,beta_task,gamma_task go"
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


def test_bridge_refuses_wrong_or_missing_secrets_and_other_sessions_children(
    tmp_path: Path,
    db: str,
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        bridge = cp._bridge
        assert bridge is not None
        agent = example_agent(tmp_path)
        a = cp.spawn(agent, tmp_path).session.id
        b = cp.spawn(agent, tmp_path).session.id
        b_child = cp.spawn(agent, tmp_path, parent=b, announce=False).session.id

        def ask(session: str, secret: str | None, op: str, args: dict) -> dict:  # type: ignore[type-arg]
            request = {"session": session, "op": op, "args": args}
            if secret is not None:
                request["secret"] = secret
            return call_bridge(bridge.path, request, timeout=30)

        for secret in (
            None,
            "",
            "0" * 64,
            bridge.credentials.secret_for(b),
        ):  # b's secret is wrong for a
            answer = ask(a, secret, "list_subagents", {})
            assert answer == {"ok": False, "error": "refused: missing or wrong session secret"}
        mine = ask(a, bridge.credentials.secret_for(a), "list_subagents", {})
        assert mine == {"ok": True, "result": []}  # a sees no children of b
        for op in ("subagent_result", "cancel_subagent", "send_to_subagent"):
            answer = ask(a, bridge.credentials.secret_for(a), op, {"id": b_child, "message": "x"})
            assert answer["ok"] is False and "not a subagent of this session" in answer["error"]
        assert cp.get(b_child).state is not SessionState.CLOSED
        theirs = ask(b, bridge.credentials.secret_for(b), "list_subagents", {})
        assert [c["id"] for c in theirs["result"]] == [b_child]


@pytest.mark.timeout(60)
def test_a_second_process_on_the_store_leaves_the_first_ones_bridge_and_no_key_is_on_disk(
    tmp_path: Path,
    db: str,
) -> None:
    import subprocess
    import sys

    with open_cp(tmp_path, db=db) as cp:
        bridge = cp._bridge
        assert bridge is not None
        session = cp.spawn(example_agent(tmp_path), tmp_path).session.id
        other = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys, time\n"
                "from control_plane import ControlPlane\n"
                "cp = ControlPlane.open(sys.argv[1])\n"
                "print('open', flush=True)\n"
                "time.sleep(30)\n",
                db,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert other.stdout is not None and other.stdout.readline().strip() == "open"
            request = {"session": session, "secret": bridge.credentials.secret_for(session)}
            answer = call_bridge(bridge.path, {**request, "op": "list_subagents", "args": {}})
            assert answer == {"ok": True, "result": []}  # the first process's tools still work
        finally:
            other.kill()
            other.wait(10)
        leftovers = [p.name for p in tmp_path.iterdir() if "key" in p.name]
        assert leftovers == []  # the key that makes the secrets lives in memory only
