"""The subagent bridge under a hostile agent: a session's long waits never hold back another
session's tools, waits are finite and capped, and spawn keys are namespaced per parent.

A real control plane on a real store running agents as real subprocesses; requests go to the
bridge's Unix socket as a session's MCP server sends them (or through the real MCP server
process, driven by the MCP client as an agent would). What the agents do is no part of these
tests, so they are the noop agent (a tenth of the example agent's start-up CPU)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol

# The MCP client, imported before any control plane here loads its MCP server on a thread.
import httpx2  # noqa: F401
import mcp.client.session
import mcp.client.streamable_http  # noqa: F401
import pytest

from control_plane.subagents import rules
from control_plane.subagents.wire import call_bridge
from protocol.example_agent import mcp as example_agent_mcp
from state_machines import SessionState
from tests.conftest import eventually
from tests.support.cp_harness import noop_agent, open_cp
from tests.support.subagent_callers import act_as


class _Ask(Protocol):
    def __call__(
        self, session: str, op: str, args: dict[str, Any], timeout: float = 60
    ) -> dict[str, Any]: ...


def _asker(cp: Any) -> _Ask:
    """Ask the bridge as a session's agent would: this test process is made a root of the
    session's agent tree, so the kernel's answer (SO_PEERCRED) makes it that session's."""
    bridge = cp._bridge
    assert bridge is not None

    def ask(session: str, op: str, args: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        act_as(bridge, session)
        request = {"session": session, "op": op, "args": args}
        return call_bridge(bridge.path, request, timeout=timeout)

    return ask


@pytest.mark.timeout(90)
def test_eight_long_waits_of_one_session_do_not_delay_another_sessions_list(
    tmp_path: Path,
    db: str,
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        ask = _asker(cp)
        agent = noop_agent()
        a = cp.spawn(agent, tmp_path).session.id
        b = cp.spawn(agent, tmp_path).session.id
        child = cp.spawn(agent, tmp_path, "#hang", parent=a, announce=False)
        b_child = cp.spawn(agent, tmp_path, parent=b, announce=False).session.id
        eventually(lambda: cp.get(child.session.id).state is SessionState.RUNNING)

        answers: list[dict[str, Any]] = []
        lock = threading.Lock()

        def long_wait() -> None:
            answer = ask(a, "subagent_result", {"id": child.session.id, "wait": 40})
            with lock:
                answers.append(answer)

        waiters = [threading.Thread(target=long_wait) for _ in range(8)]
        for thread in waiters:
            thread.start()
        time.sleep(1.0)  # the eight waits are in the bridge
        started = time.monotonic()
        listed = ask(b, "list_subagents", {})
        b_latency = time.monotonic() - started
        assert [c["id"] for c in listed["result"]] == [b_child]
        started = time.monotonic()
        own = ask(a, "list_subagents", {})  # a's own quick calls are not stuck behind its waits
        a_latency = time.monotonic() - started
        assert [c["id"] for c in own["result"]] == [child.session.id]
        print(f"b list latency {b_latency:.3f}s, a list latency {a_latency:.3f}s")
        assert b_latency < 5 and a_latency < 5
        assert len(answers) == 0  # the waits are still waiting

        cp.cancel(child.session.id)  # the waits end with the run, not at their deadline
        for thread in waiters:
            thread.join(20)
        assert len(answers) == 8
        assert {a["result"]["status"] for a in answers} == {"cancelled"}


@pytest.mark.timeout(60)
def test_a_session_has_at_most_its_share_of_the_pool_and_others_go_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db: str
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        ask = _asker(cp)
        bridge = cp._bridge
        assert bridge is not None
        agent = noop_agent()
        a = cp.spawn(agent, tmp_path).session.id
        b = cp.spawn(agent, tmp_path).session.id
        # One thing is not real here: a's list_subagents is made slow (1 s on the pool), to
        # see how many of a's requests hold a thread at once.
        real_list = bridge._list
        lock = threading.Lock()
        running = peak = 0

        def slow_list(session_id: str) -> list[dict[str, Any]]:
            nonlocal running, peak
            if session_id != a:
                return real_list(session_id)
            with lock:
                running += 1
                peak = max(peak, running)
            try:
                time.sleep(1.0)
                return real_list(session_id)
            finally:
                with lock:
                    running -= 1

        monkeypatch.setattr(bridge, "_list", slow_list)
        started = time.monotonic()
        floods = [threading.Thread(target=ask, args=(a, "list_subagents", {})) for _ in range(6)]
        for thread in floods:
            thread.start()
        time.sleep(0.3)
        b_started = time.monotonic()
        assert ask(b, "list_subagents", {}) == {"ok": True, "result": []}
        b_latency = time.monotonic() - b_started
        for thread in floods:
            thread.join(30)
        a_total = time.monotonic() - started
        assert peak == rules.PER_SESSION_IN_FLIGHT == 2
        assert b_latency < 0.5
        assert a_total >= 2.9  # six 1 s requests, two at a time


@pytest.mark.timeout(60)
def test_wait_must_be_a_finite_number_and_long_waits_are_cut_to_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db: str
) -> None:
    assert rules.parse_wait(1e12) == (60.0, True)
    assert rules.parse_wait(10**400) == (60.0, True)
    assert rules.parse_wait(None) == (0.0, False)
    assert rules.parse_wait(60) == (60.0, False)
    with open_cp(tmp_path, db=db) as cp:
        ask = _asker(cp)
        agent = noop_agent()
        a = cp.spawn(agent, tmp_path).session.id
        child = cp.spawn(agent, tmp_path, "#hang", parent=a, announce=False).session.id
        eventually(lambda: cp.get(child).state is SessionState.RUNNING)
        refused = {
            "inf": 'not "inf"',
            float("inf"): "finite",  # sent as the JSON token Infinity
            float("-inf"): "finite",
            float("nan"): "finite",
            -1: ">= 0",
            True: "not true",
            "30": 'not "30"',
            None: "",  # absent: no wait, answered at once
        }
        for value, reason in refused.items():
            started = time.monotonic()
            answer = ask(a, "subagent_result", {"id": child, "wait": value})
            assert time.monotonic() - started < 2
            if value is None:
                assert answer == {"ok": True, "result": {"id": child, "status": "running"}}
                continue
            assert answer["ok"] is False, value
            assert answer["error"].startswith("wait must be") and reason in answer["error"]
        for value in ([1], {"s": 1}):
            answer = ask(a, "subagent_result", {"id": child, "wait": value})
            assert answer["ok"] is False and "wait must be a number" in answer["error"]

        under = ask(a, "subagent_result", {"id": child, "wait": 0.3})  # ends before the run
        assert under == {"ok": True, "result": {"id": child, "status": "running", "waited": 0.3}}
        monkeypatch.setattr(rules, "MAX_WAIT_S", 1.0)  # not a minute in a test
        for value in (1e12, 10**30):
            started = time.monotonic()
            answer = ask(a, "subagent_result", {"id": child, "wait": value})
            elapsed = time.monotonic() - started
            assert answer == {
                "ok": True,
                "result": {"id": child, "status": "running", "waited": 1.0, "capped": True},
            }
            assert 0.9 < elapsed < 5


@pytest.mark.timeout(60)
def test_the_mcp_tool_describes_the_cap_and_passes_the_bridges_refusal(
    tmp_path: Path, db: str
) -> None:
    """The control plane's HTTP MCP endpoint, driven by the official MCP client as an agent
    would."""
    with open_cp(tmp_path, db=db) as cp:
        bridge = cp._bridge
        assert bridge is not None
        agent = noop_agent()
        a = cp.spawn(agent, tmp_path).session.id
        child = cp.spawn(agent, tmp_path, "#hang", parent=a, announce=False).session.id
        eventually(lambda: cp.get(child).state is SessionState.RUNNING)
        act_as(bridge, a)
        assert bridge.http is not None
        entry = bridge.http.entry_for(a)
        server = SimpleNamespace(url=entry["url"], headers=[])

        async def agent_side() -> tuple[str, list[str]]:
            async with example_agent_mcp.mcp_session(server) as session:
                tools = await session.list_tools()
                (described,) = [t.description for t in tools.tools if t.name == "subagent_result"]
                answers = [
                    await example_agent_mcp.call(session, "subagent_result", {"id": child, **w})
                    for w in ({"wait": "inf"}, {"wait": -1}, {"wait": 0.2}, {}, {"wait": True})
                ]
            return described, answers

        described, answers = asyncio.run(asyncio.wait_for(agent_side(), 40))
        assert f"at most {int(rules.MAX_WAIT_S)}" in described and "running" in described
        # The tool passes arguments as the agent sent them; the bridge refuses what is
        # not a finite JSON number >= 0 (a string, a boolean), with the reason.
        assert answers[0].startswith("error: ") and 'not "inf"' in answers[0]
        assert answers[1].startswith("error: ") and "wait must be >= 0" in answers[1]
        assert json.loads(answers[2]) == {"id": child, "status": "running", "waited": 0.2}
        assert json.loads(answers[3]) == {"id": child, "status": "running"}
        assert answers[4].startswith("error: ") and "not true" in answers[4]


@pytest.mark.timeout(60)
def test_spawn_keys_are_namespaced_per_parent_and_retries_get_the_first_child(
    tmp_path: Path,
    db: str,
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        ask = _asker(cp)
        agent = noop_agent()
        a = cp.spawn(agent, tmp_path).session.id
        b = cp.spawn(agent, tmp_path).session.id

        def spawn(session: str, key: Any, task: str = "keyed task") -> dict[str, Any]:
            args = {"task": task, "idempotencyKey": key}
            return ask(session, "spawn_subagent", args)

        first = spawn(a, "k")
        assert first["ok"] is True
        a_child = first["result"]["id"]
        host = cp.spawn(agent, tmp_path, "keyed task", idempotency_key="k").session
        assert host.id not in (a, b, a_child) and host.parent_id is None  # a new root
        assert cp.spawn(agent, tmp_path, "keyed task", idempotency_key="k").session.id == host.id
        theirs = spawn(b, "k")
        assert theirs["ok"] is True
        b_child = theirs["result"]["id"]
        assert b_child not in (a_child, host.id) and cp.get(b_child).parent_id == b
        again = spawn(a, "k")  # a's agent retrying: its first child, not a second one
        assert again["ok"] is True and again["result"]["id"] == a_child
        assert [c.id for c in cp.children(a)] == [a_child]
        assert cp.get(a_child).spawn_key == f"subagent:{a}:k"
        # a child cannot take its parent's (or the host's) key: its own is namespaced too
        grandchild = spawn(a_child, "k")
        assert grandchild["ok"] is True
        assert grandchild["result"]["id"] not in (a_child, host.id, b_child)
        # the same key for another task is a conflict, reported with the reason
        other = spawn(a, "k", task="another task")
        assert other["ok"] is False and "already used" in other["error"]

        for bad, reason in (
            (123, "non-empty string"),
            (True, "non-empty string"),
            (["k"], "non-empty string"),
            ("", "non-empty string"),
            ("x" * 201, "longer than 200"),
        ):
            answer = spawn(a, bad, task=f"task for {reason}")
            assert answer["ok"] is False and reason in answer["error"], bad
        assert len(cp.children(a)) == 1  # nothing was spawned for a refused key
        assert spawn(a, "x" * 200)["ok"] is True

        # A child stored before keys were namespaced (key "old", un-prefixed): the parent's
        # retry after the upgrade does not find it and spawns a new child.
        legacy = cp.spawn(agent, tmp_path, "old task", parent=b, idempotency_key="old").session
        retried = spawn(b, "old", task="old task")
        assert retried["ok"] is True and retried["result"]["id"] != legacy.id


@pytest.mark.timeout(60)
def test_close_ends_parked_waits_and_the_bridge_threads(tmp_path: Path, db: str) -> None:
    cp = open_cp(tmp_path, db=db)
    try:
        ask = _asker(cp)
        agent = noop_agent()
        a = cp.spawn(agent, tmp_path).session.id
        child = cp.spawn(agent, tmp_path, "#hang", parent=a, announce=False).session.id
        eventually(lambda: cp.get(child).state is SessionState.RUNNING)
        ask(a, "list_subagents", {})  # a pool thread exists
        assert any(t.name.startswith("cp-bridge") for t in threading.enumerate())
        outcome: list[BaseException | dict[str, Any]] = []

        def parked() -> None:
            try:
                outcome.append(ask(a, "subagent_result", {"id": child, "wait": 50}))
            except (ValueError, OSError) as exc:  # the connection closed without an answer
                outcome.append(exc)

        waiter = threading.Thread(target=parked)
        waiter.start()
        time.sleep(0.5)
    finally:
        started = time.monotonic()
        cp.close()
        closing = time.monotonic() - started
    waiter.join(10)
    assert not waiter.is_alive() and len(outcome) == 1
    assert closing < 10
    eventually(lambda: not any(t.name.startswith("cp-bridge") for t in threading.enumerate()), 5)
