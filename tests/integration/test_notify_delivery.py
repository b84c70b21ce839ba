"""Webhooks end to end: a control plane running real agents, its events POSTed to a real
receiver on 127.0.0.1 that fails, drops connections and holds requests."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from actors.delivery.hooks import Format
from control_plane import Budget
from state_machines.event_kinds import EventKind
from store import AgentSpec
from tests.conftest import eventually
from tests.support.cp_harness import example_agent, noop_agent, open_cp
from tests.support.notify_hooks import CONSOLE, fast, hook_to
from tests.support.webhook_receiver import OK, Reply, receiving

SECRET = "hook-secret-value"


def _ids(cp: object, session_id: str, kind: str) -> list[str]:
    return [str(e.id) for e in cp.events(session_id) if e.kind == kind]  # type: ignore[attr-defined]


def test_turn_ends_arrive_signed_in_order_with_the_event_id_and_a_console_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    with receiving(SECRET) as receiver:
        hook = hook_to(receiver.url, events=("turn_ended",), secret_env="HOOK_SECRET")
        with open_cp(tmp_path, **fast(hook)) as cp:
            spawned = cp.spawn(noop_agent(), tmp_path, "one")
            sid = spawned.session.id
            for text in ("two", "three"):
                cp.wait(cp.prompt(sid, text).id, 30)
            expected = _ids(cp, sid, EventKind.TURN_ENDED)
            assert receiver.wait_for(lambda r: len(r.acked) == 3)
    assert [r.key for r in receiver.requests] == expected
    assert all(r.signature_ok for r in receiver.requests)
    body = receiver.requests[0].json()
    assert body["type"] == "turn_ended" and body["eventId"] == int(expected[0])
    assert body["link"] == f"{CONSOLE}#/s/{sid}"
    assert body["details"]["stopReason"] == "end_turn"


def test_a_permission_request_is_told_with_its_deep_link(tmp_path: Path) -> None:
    with receiving() as receiver:
        hook = hook_to(receiver.url, events=("permission_requested",), fmt=Format.NTFY)
        with open_cp(tmp_path, **fast(hook)) as cp:
            sid = cp.spawn(noop_agent(), tmp_path).session.id
            # A request is asked by the session's running agent, so after its actor took the
            # session: an actor taking it later recovers it, and withdraws what an earlier
            # agent left pending (store/ops/recovery.py).
            eventually(lambda: cp.get(sid).owner is not None, 30, "the session's actor has it")
            tool_call = {"toolCallId": "call-1", "title": "Edit main.py"}
            options = [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]
            cp.open_permission_request("acpctl-permission-1", sid, tool_call, options)
            assert receiver.wait_for(lambda r: len(r.acked) == 1)
            # Its settlement is in the log too, and is no notification: the next one the
            # hook gets is the next request.
            assert cp.decide_permission("acpctl-permission-1", "allow", "phone")
            cp.open_permission_request("acpctl-permission-2", sid, tool_call, options)
            assert receiver.wait_for(lambda r: len(r.acked) == 2)
            event_id, _ = _ids(cp, sid, EventKind.PERMISSION_REQUESTED)
    got, second = receiver.requests
    assert second.headers["Click"].endswith("?permission=acpctl-permission-2")
    assert got.key == event_id
    assert got.headers["Click"] == f"{CONSOLE}#/s/{sid}?permission=acpctl-permission-1"
    assert "Edit main.py" in got.body.decode()


def test_failures_drops_and_refusals_each_event_acknowledged_once_in_order(
    tmp_path: Path,
) -> None:
    """500 twice, a dropped connection, a 404 (refused for good: skipped), then fine."""
    script = {1: Reply(500), 2: Reply(500), 3: Reply(drop=True), 5: Reply(404)}

    def failures(reason: str) -> float:
        value = REGISTRY.get_sample_value(
            "acpctl_notify_failures_total", {"hook": "flaky", "reason": reason}
        )
        return value or 0.0

    before = {r: failures(r) for r in ("http_5xx", "connection", "http_4xx")}
    with receiving() as receiver:
        receiver.script = lambda _r, n: script.get(n, OK)
        hook = hook_to(receiver.url, name="flaky", events=("turn_ended",))
        with open_cp(tmp_path, **fast(hook)) as cp:
            spawned = cp.spawn(noop_agent(), tmp_path, "a")
            sid = spawned.session.id
            for text in ("b", "c"):
                cp.wait(cp.prompt(sid, text).id, 30)
            first, second, third = _ids(cp, sid, EventKind.TURN_ENDED)
            assert receiver.wait_for(lambda r: len(r.requests) == 6)
            time.sleep(0.2)  # nothing more comes
    keys = [r.key for r in receiver.requests]
    assert keys == [first, first, first, first, second, third]
    assert receiver.acked_keys() == [first, third]  # the second refused, and skipped
    assert failures("http_5xx") - before["http_5xx"] == 2
    assert failures("connection") - before["connection"] == 1
    assert failures("http_4xx") - before["http_4xx"] == 1


def test_turns_run_on_while_the_receiver_holds_every_delivery(tmp_path: Path) -> None:
    """A receiver that answers nothing (held) slows no turn: ten turns end while the first
    notification still waits, then all arrive, in order."""
    with receiving() as receiver:
        receiver.hold()
        receiver.script = lambda _r, _n: Reply(hold=True)
        hook = hook_to(receiver.url, events=("turn_ended",))
        with open_cp(tmp_path, **fast(hook)) as cp:
            sid = cp.spawn(noop_agent(), tmp_path, "0").session.id
            assert receiver.wait_for(lambda r: r.held == 1)
            started = time.monotonic()
            for n in range(1, 10):
                cp.wait(cp.prompt(sid, str(n)).id, 30)
            took = time.monotonic() - started
            assert receiver.held == 1 and receiver.acked == []  # every delivery blocked
            assert dict(cp.levels().notify_lag)["test"] >= took  # behind since the first
            receiver.script = lambda _r, _n: OK
            receiver.release()
            assert receiver.wait_for(lambda r: len(r.acked) == 10)
            expected = _ids(cp, sid, EventKind.TURN_ENDED)
    assert took < 5.0, f"nine turns took {took:.2f}s behind a held receiver"
    assert receiver.acked_keys() == expected


def test_a_hook_added_later_covers_old_sessions_from_now_on_without_replaying_history(
    tmp_path: Path,
) -> None:
    with open_cp(tmp_path) as cp:
        old = cp.spawn(noop_agent(), tmp_path, "before the hook")
        assert old.command is not None
        cp.wait(old.command.id, 30)
    with receiving() as receiver:
        hook = hook_to(receiver.url, events=("turn_ended",))
        with open_cp(tmp_path, **fast(hook)) as cp:
            cp.wait(cp.prompt(old.session.id, "after").id, 30)
            assert receiver.wait_for(lambda r: len(r.acked) == 1)
            time.sleep(0.2)
            last = _ids(cp, old.session.id, EventKind.TURN_ENDED)[-1]
    assert [r.key for r in receiver.requests] == [last]


def test_failed_turns_are_task_failed_in_a_batch_and_session_error_elsewhere(
    tmp_path: Path,
) -> None:
    with receiving() as receiver:
        hook = hook_to(receiver.url, events=("task_failed", "session_error"))
        with open_cp(tmp_path, **fast(hook)) as cp:
            agent = AgentSpec("gone", ("false",))  # exits at once: the start fails
            batch = cp.spawn(agent, tmp_path, "hi", metadata={"batch": "b1", "task": "t7"})
            alone = cp.spawn(agent, tmp_path, "hi")
            for spawned in (batch, alone):
                assert spawned.command is not None
                cp.wait(spawned.command.id, 30)
            assert receiver.wait_for(lambda r: len(r.acked) == 2)
    by_session = {r.json()["session"]["id"]: r.json() for r in receiver.requests}
    task = by_session[batch.session.id]
    assert task["type"] == "task_failed" and task["session"]["task"] == "t7"
    assert task["details"]["kind"] == "agent_start_failed" and task["details"]["error"]
    assert by_session[alone.session.id]["type"] == "session_error"


@pytest.mark.full
def test_an_agent_that_dies_mid_turn_is_a_session_error(tmp_path: Path) -> None:
    with receiving() as receiver:
        hook = hook_to(receiver.url, events=("session_error",))
        with open_cp(tmp_path, **fast(hook)) as cp:
            spawned = cp.spawn(example_agent(tmp_path), tmp_path, "#crash")
            assert spawned.command is not None
            cp.wait(spawned.command.id, 30)
            assert receiver.wait_for(lambda r: len(r.acked) == 1)
    body = receiver.requests[0].json()
    assert body["type"] == "session_error" and body["details"]["kind"] == "turn_failed"


def test_a_budget_that_stops_a_session_is_told(tmp_path: Path) -> None:
    with receiving() as receiver:
        hook = hook_to(receiver.url, events=("budget_exceeded",))
        with open_cp(tmp_path, **fast(hook)) as cp:
            spawned = cp.spawn(noop_agent(), tmp_path, "hello", budget=Budget(tokens=1))
            assert spawned.command is not None
            cp.wait(spawned.command.id, 30)
            assert receiver.wait_for(lambda r: len(r.acked) == 1)
            lag = dict(cp.levels().notify_lag)
    body = receiver.requests[0].json()
    assert body["type"] == "budget_exceeded" and body["details"]["budget"] == "session tokens"
    assert lag["test"] < 1.0  # caught up (0 once its checkpoint's commit is in)
