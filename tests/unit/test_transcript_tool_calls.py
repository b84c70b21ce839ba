"""The transcript mapping of tool calls: tool-use messages, results, and their edge cases."""

from __future__ import annotations

from tests.support.transcript_script import (
    EventScript,
    by_role,
    messages,
    text_result,
)

# --------------------------------------------------------------------------- tool calls


def test_completed_tool_call_flushes_tool_use_message_then_tool_result() -> None:
    entries = (
        EventScript()
        .prompt()
        .say("Listing.")
        .tool("t1", title="bash", kind="execute", rawInput={"command": "ls"})
        .tool_update("t1", "completed", content=text_result("a.py\n"))
        .say("Done.")
        .end()
        .entries()
    )
    roles = [(m["role"], m.get("stopReason")) for m in messages(entries)]
    assert roles == [
        ("user", None),
        ("assistant", "toolUse"),
        ("toolResult", None),
        ("assistant", "stop"),
    ]
    tool_use, result = messages(entries)[1:3]
    assert tool_use["content"][1] == {
        "type": "toolCall",
        "id": "t1",
        "name": "bash",
        "arguments": {"command": "ls"},
    }
    assert tool_use["usage"]["totalTokens"] == 0
    assert result == {
        "role": "toolResult",
        "toolCallId": "t1",
        "toolName": "bash",
        "content": [{"type": "text", "text": "a.py\n"}],
        "isError": False,
        "timestamp": result["timestamp"],
    }


def test_tool_call_announced_already_completed_gets_its_result_immediately() -> None:
    entries = (
        EventScript()
        .prompt()
        .tool("t1", "completed", title="read", content=text_result("x"))
        .end()
        .entries()
    )
    assert [m["role"] for m in messages(entries)] == ["user", "assistant", "toolResult"]


def test_failed_tool_call_result_is_marked_as_error() -> None:
    entries = (
        EventScript()
        .prompt()
        .tool("t1")
        .tool_update("t1", "failed", content=text_result("denied"))
        .end()
        .entries()
    )
    result = by_role(entries, "toolResult")[0]
    assert result["isError"] is True
    assert result["content"] == [{"type": "text", "text": "denied"}]


def test_tool_name_falls_back_from_title_to_kind_to_tool() -> None:
    entries = (
        EventScript()
        .prompt()
        .tool("a", title="Read x", kind="read")
        .tool("b", kind="edit")
        .tool("c")
        .end()
        .entries()
    )
    calls = by_role(entries, "assistant")[0]["content"]
    assert [call["name"] for call in calls] == ["Read x", "edit", "tool"]


def test_non_object_raw_input_becomes_empty_arguments() -> None:
    entries = EventScript().prompt().tool("t1", rawInput="ls -la").end().entries()
    assert by_role(entries, "assistant")[0]["content"][0]["arguments"] == {}


def test_tool_call_update_before_flush_updates_name_and_arguments() -> None:
    entries = (
        EventScript()
        .prompt()
        .tool("t1")
        .tool_update("t1", "in_progress", title="grep", rawInput={"pattern": "x"})
        .tool_update("t1", "completed")
        .entries()
    )
    call = by_role(entries, "assistant")[0]["content"][0]
    assert (call["name"], call["arguments"]) == ("grep", {"pattern": "x"})
    assert by_role(entries, "toolResult")[0]["toolName"] == "grep"


def test_dangling_tool_call_gets_synthesized_error_result_at_turn_end() -> None:
    entries = EventScript().prompt().tool("t1", title="bash").say("gave up").end().entries()
    result = by_role(entries, "toolResult")[0]
    assert result["toolCallId"] == "t1"
    assert result["isError"] is True
    assert "before the tool call finished" in result["content"][0]["text"]
    assert messages(entries)[-1] is result


def test_interrupted_turn_is_aborted_with_synthesized_results_and_a_lifecycle_entry() -> None:
    entries = (
        EventScript()
        .prompt()
        .tool("t1", "in_progress")
        .add(
            "interrupted",
            {"commandId": "c", "attempts": 1, "willRetry": True, "reason": "agent crashed"},
        )
        .entries()
    )
    assistant, result = messages(entries)[1:]
    assert assistant["stopReason"] == "aborted"
    assert assistant["errorMessage"] == "agent crashed"
    assert result["isError"] is True and "agent crashed" in result["content"][0]["text"]
    assert entries[-1]["customType"] == "acp-control-plane"
    assert entries[-1]["data"] == {
        "event": "interrupted",
        "commandId": "c",
        "attempts": 1,
        "willRetry": True,
        "reason": "agent crashed",
    }


def test_open_turn_at_end_of_events_is_aborted_and_tool_calls_get_session_ended_result() -> None:
    entries = EventScript().prompt().say("working").tool("t1").entries()
    assistant, result = messages(entries)[1:]
    assert assistant["stopReason"] == "aborted"
    assert result["content"] == [
        {"type": "text", "text": "session ended before the tool call finished"}
    ]


def test_parallel_tool_calls_each_get_exactly_one_result() -> None:
    entries = (
        EventScript()
        .prompt()
        .tool("a")
        .tool("b")
        .tool_update("a", "completed", content=text_result("A"))
        .tool_update("b", "completed", content=text_result("B"))
        .end()
        .entries()
    )
    assert [m["toolCallId"] for m in by_role(entries, "toolResult")] == ["a", "b"]
    assert len(by_role(entries, "assistant")) == 1


def test_late_update_for_a_finished_tool_call_adds_no_second_result() -> None:
    entries = (
        EventScript()
        .prompt()
        .tool("t1")
        .tool_update("t1", "completed", content=text_result("ok"))
        .tool_update("t1", "completed", content=text_result("again"))
        .end()
        .entries()
    )
    assert [m["content"] for m in by_role(entries, "toolResult")] == [
        [{"type": "text", "text": "ok"}]
    ]


def test_reused_tool_call_id_in_a_later_turn_gets_a_distinct_block_id() -> None:
    script = (
        EventScript().prompt().tool("t1", "completed").end().prompt().tool("t1", "completed").end()
    )
    assert [m["toolCallId"] for m in by_role(script.entries(), "toolResult")] == ["t1", "t1~2"]


def test_update_for_an_unannounced_tool_call_creates_the_call() -> None:
    entries = EventScript().prompt().tool_update("t9", "completed", title="fetch").end().entries()
    assert by_role(entries, "assistant")[0]["content"][0]["id"] == "t9"
    assert by_role(entries, "toolResult")[0]["toolName"] == "fetch"


def test_diff_tool_content_is_rendered_as_unified_diff_text() -> None:
    diff = [{"type": "diff", "path": "/r/a.py", "oldText": "x = 1\n", "newText": "x = 2\n"}]
    entries = EventScript().prompt().tool("t1", "completed", content=diff).entries()
    text = by_role(entries, "toolResult")[0]["content"][0]["text"]
    assert text == "--- /r/a.py\n+++ /r/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2"


def test_raw_output_is_the_result_when_a_tool_reports_no_content() -> None:
    entries = EventScript().prompt().tool("t1", "completed", rawOutput={"exit": 0}).entries()
    assert by_role(entries, "toolResult")[0]["content"] == [{"type": "text", "text": '{"exit":0}'}]
