"""The ACP runtime against the bundled example agent as a real subprocess over stdio."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest
from acp.schema import PermissionOption, ToolCallUpdate

from protocol.agent.client import ControlPlaneClient
from protocol.agent.connection import AgentConnection
from protocol.agent.permissions import Decision, PermissionBroker, PermissionPolicy
from state_machines.errors import AgentExited, AgentProtocolError, AgentStartFailed
from tests.support.agent_harness import AgentHarness


def _start(h: AgentHarness, conn: AgentConnection) -> str:
    h.run(conn.start())
    return h.run(conn.new_session()).acp_session_id


def _text(prompt: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": prompt}]


def test_thousand_rapid_updates_are_recorded_in_wire_order_verbatim(harness: AgentHarness) -> None:
    conn = harness.connect()
    _start(harness, conn)
    result = harness.run(conn.prompt(_text("#updates=1000")))
    assert result.stop_reason == "end_turn"
    events = [
        e
        for e in harness.events("session_update")
        if '"available_commands_update"' not in e.raw  # sent after session/new, not the turn's
    ]
    texts = [json.loads(e.raw)["params"]["update"]["content"]["text"] for e in events]
    assert texts == [str(i) for i in range(1000)]
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    first = events[0].raw
    assert first.startswith("{") and '"method":"session/update"' in first.replace(" ", "")


def test_updates_go_to_the_recorder_only_not_through_the_sdk(
    harness: AgentHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK would validate every notification into typed models in a task of its own;
    # the tap hands update frames to the recorder and keeps them from the SDK.
    seen: list[Any] = []

    async def counting(self: Any, session_id: str, update: Any, **_: Any) -> None:
        seen.append(update)

    monkeypatch.setattr(ControlPlaneClient, "session_update", counting)
    conn = harness.connect()
    _start(harness, conn)
    result = harness.run(conn.prompt(_text("#chunks=50")))
    assert result.stop_reason == "end_turn"
    assert seen == []
    assert harness.message_text().startswith("c0 c1 ")
    assert len(harness.events("session_update")) >= 50


def test_prompt_streams_thought_message_and_tool_call_and_returns_usage(
    harness: AgentHarness,
) -> None:
    conn = harness.connect()
    _start(harness, conn)
    result = harness.run(conn.prompt(_text("#tool hello there")))
    assert result.stop_reason == "end_turn"
    assert result.usage is not None and result.usage.get("totalTokens", 0) > 0
    kinds = [u["sessionUpdate"] for u in harness.updates()]
    assert "agent_thought_chunk" in kinds and "agent_message_chunk" in kinds
    assert kinds.index("tool_call") < kinds.index("tool_call_update")
    statuses = [u.get("status") for u in harness.updates() if u["sessionUpdate"].startswith("tool")]
    assert statuses[-1] == "completed"


def test_unknown_update_kinds_are_kept_raw(harness: AgentHarness) -> None:
    conn = harness.connect()
    _start(harness, conn)
    harness.run(conn.prompt(_text("#unknown-update hi")))
    vendor = [u for u in harness.updates() if u["sessionUpdate"] == "vendor_example_kind"]
    assert len(vendor) == 1 and vendor[0]["vendor"] == {"n": 1}


@pytest.mark.parametrize(
    ("decision", "expected"),
    [(Decision.ALLOW, "permission: allowed"), (Decision.DENY, "permission: rejected")],
)
def test_permission_policy_allow_and_deny(
    harness: AgentHarness, decision: Decision, expected: str
) -> None:
    conn = harness.connect(policy=PermissionPolicy(decision))
    _start(harness, conn)
    harness.run(conn.prompt(_text("#permission #tool do it")))
    assert expected in harness.message_text()


def test_permission_rule_by_tool_kind_overrides_the_default(harness: AgentHarness) -> None:
    policy = PermissionPolicy(Decision.DENY, by_kind={"read": Decision.ALLOW})
    conn = harness.connect(policy=policy)
    _start(harness, conn)
    harness.run(conn.prompt(_text("#permission #tool read it")))  # the example's tool is "read"
    assert "permission: allowed" in harness.message_text()


def test_permission_ask_goes_to_the_host_callback(harness: AgentHarness) -> None:
    asked: list[str] = []

    async def ask(session_id: str, call: ToolCallUpdate, options: list[PermissionOption]) -> str:
        asked.append(call.tool_call_id)
        return next(o.option_id for o in options if o.kind == "reject_once")

    conn = harness.connect(policy=PermissionPolicy(Decision.ASK), ask=ask)
    _start(harness, conn)
    harness.run(conn.prompt(_text("#permission #tool please")))
    assert len(asked) == 1
    assert "permission: rejected" in harness.message_text()


def test_pending_permission_is_answered_cancelled_after_cancel(harness: AgentHarness) -> None:
    never = asyncio.Event()
    pending = asyncio.Event()

    async def ask(session_id: str, call: ToolCallUpdate, options: list[PermissionOption]) -> str:
        pending.set()
        await never.wait()  # the host never answers
        return options[0].option_id

    conn = harness.connect(policy=PermissionPolicy(Decision.ASK), ask=ask)
    _start(harness, conn)

    async def scenario() -> str:
        turn = asyncio.ensure_future(conn.prompt(_text("#permission #tool wait")))
        await asyncio.wait_for(pending.wait(), 10)  # the request is pending, then cancel
        await conn.cancel()
        return (await asyncio.wait_for(turn, 10)).stop_reason

    assert harness.run(scenario()) == "cancelled"
    assert conn.permissions.answered == [("tool-1", "cancelled")]


async def _turn_updates_after(harness: AgentHarness, before: int) -> None:
    """Until the agent has sent (and the recorder stored) an update beyond ``before``."""
    while len(await asyncio.to_thread(harness.events, "session_update")) <= before:
        await asyncio.sleep(0.01)


def test_cancel_mid_turn_gives_stop_reason_cancelled(harness: AgentHarness) -> None:
    conn = harness.connect()
    _start(harness, conn)

    async def scenario() -> str:
        before = len(await asyncio.to_thread(harness.events, "session_update"))
        turn = asyncio.ensure_future(conn.prompt(_text("#hang")))
        await asyncio.wait_for(_turn_updates_after(harness, before), 10)  # the turn is on
        await conn.cancel()
        return (await asyncio.wait_for(turn, 10)).stop_reason

    assert harness.run(scenario()) == "cancelled"
    assert conn.alive


def test_hung_agent_is_cancelled_then_killed_after_the_grace_period(
    harness: AgentHarness,
) -> None:
    conn = harness.connect()
    _start(harness, conn)
    with pytest.raises(AgentExited):
        harness.run(conn.prompt(_text("#hang-hard"), timeout_s=0.5, grace_s=0.5))
    assert not conn.alive
    assert [e.payload["graceS"] for e in harness.events("turn_timeout_kill")] == [0.5]


def test_agent_crash_mid_turn_is_a_typed_error_and_an_event(harness: AgentHarness) -> None:
    conn = harness.connect()
    _start(harness, conn)
    with pytest.raises(AgentExited) as info:
        harness.run(conn.prompt(_text("#crash now")))
    assert info.value.exit_code == 3
    exits = harness.events("agent_exited")
    assert len(exits) == 1 and exits[0].payload["exitCode"] == 3
    assert exits[0].payload["expected"] is False


def test_garbage_on_stdout_is_a_protocol_error_and_an_event(harness: AgentHarness) -> None:
    conn = harness.connect()
    _start(harness, conn)
    with pytest.raises(AgentProtocolError) as info:
        harness.run(conn.prompt(_text("#garbage hi")))
    assert "non-JSON" in str(info.value)
    assert len(harness.events("agent_protocol_error")) == 1
    assert not conn.alive


def test_frame_over_the_size_limit_is_refused(harness: AgentHarness) -> None:
    conn = harness.connect(max_frame_bytes=64 * 1024)
    _start(harness, conn)
    with pytest.raises(AgentProtocolError) as info:
        harness.run(conn.prompt(_text("#oversize=300000")))
    assert "over 65536 bytes" in str(info.value)
    assert not conn.alive


def test_flooded_stderr_goes_to_the_log_file_without_blocking_the_agent(
    harness: AgentHarness,
) -> None:
    conn = harness.connect()
    _start(harness, conn)
    result = harness.run(conn.prompt(_text("#flood-stderr=1048576 still here")))
    assert result.stop_reason == "end_turn"
    assert os.path.getsize(harness.tmp / "agent.stderr.log") >= 1024 * 1024


def test_agent_exiting_during_initialize_is_agent_start_failed(harness: AgentHarness) -> None:
    conn = harness.connect("--exit-during-initialize")
    with pytest.raises(AgentStartFailed):
        harness.run(conn.start())
    assert not conn.alive


def test_missing_agent_program_is_agent_start_failed(harness: AgentHarness) -> None:
    from protocol.agent.types import AgentLaunch

    launch = AgentLaunch(
        command=("/nonexistent/agent-binary",),
        cwd=str(harness.workdir),
        env={},
        stderr_path=str(harness.tmp / "x.log"),
    )
    conn = AgentConnection(launch, harness.recorder, PermissionBroker(PermissionPolicy()))
    harness.connections.append(conn)
    with pytest.raises(AgentStartFailed):
        harness.run(conn.start())


@pytest.mark.parametrize(
    ("flags", "how"),
    [
        ((), "resumed"),
        (("--no-resume",), "loaded"),
        (("--no-resume", "--replay-after-answer"), "loaded"),
    ],
)
def test_restored_session_after_agent_kill_sees_the_earlier_conversation(
    harness: AgentHarness, flags: tuple[str, ...], how: str
) -> None:
    first = harness.connect(*flags)
    acp_id = _start(harness, first)
    harness.run(first.prompt(_text("remember the apple")))
    harness.run(first.kill())
    updates_before = len(harness.updates())
    second = harness.connect(*flags)
    harness.run(second.start())
    opened = harness.run(second.restore_session(acp_id))
    assert opened.how == how
    assert len(harness.updates()) == updates_before  # replay not re-recorded
    harness.run(second.prompt(_text("#history")))
    # Nothing of the replay is recorded again, not even a replay that trails the answer to
    # session/load (Gemini CLI's way): the new turn's updates only.
    after = harness.updates()[updates_before:]
    assert [u for u in after if u["sessionUpdate"] == "user_message_chunk"] == []
    assert "Echo: remember the apple" not in [u.get("content", {}).get("text") for u in after]
    assert "remember the apple" in harness.message_text().split("history:")[-1]


def test_agent_without_resume_or_load_gets_a_new_session_and_context_lost(
    harness: AgentHarness,
) -> None:
    first = harness.connect("--no-resume", "--no-load")
    acp_id = _start(harness, first)
    harness.run(first.kill())
    second = harness.connect("--no-resume", "--no-load")
    harness.run(second.start())
    opened = harness.run(second.restore_session(acp_id))
    assert opened.how == "context_lost" and opened.acp_session_id != acp_id
    lost = harness.events("context_lost")
    assert len(lost) == 1 and lost[0].payload["previousAcpSessionId"] == acp_id


def test_initialize_keeps_agent_info_and_capabilities(harness: AgentHarness) -> None:
    conn = harness.connect()
    harness.run(conn.start())
    assert conn.agent_name == "example-agent"
    assert conn.capabilities.load_session is True


def test_set_mode_and_config_option_and_close_reach_the_agent(harness: AgentHarness) -> None:
    conn = harness.connect()
    _start(harness, conn)
    harness.run(conn.set_mode("plan"))
    response = harness.run(conn.set_config_option("model", "example-large"))
    assert any(o.get("currentValue") == "example-large" for o in response["configOptions"])
    kinds = [u["sessionUpdate"] for u in harness.updates()]
    assert "current_mode_update" in kinds and "config_option_update" in kinds
    assert harness.run(conn.close_session()) is True
