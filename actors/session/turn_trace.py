"""A session's spans: one per turn, children for its tool calls, and one per agent start.

A turn span (``invoke_agent <agent>``, GenAI semantic conventions) starts when the actor
claims a prompt and ends with its outcome: session, command, agent, node, queue wait,
attempt, stop reason, outcome status, interrupted, and the tokens the agent reported
(``gen_ai.usage.input_tokens`` / ``output_tokens``). A subagent's turns link to the parent's
turn that spawned it (the ``traceParent`` the spawn stored). Tool calls become child spans
(``execute_tool <name>``) from ``tool_call`` to the ``tool_call_update`` that completes or
fails them; permission waits are children too (``protocol/agent/permissions.py``). Agent
starts are spans of their own (``acp.agent_start``): a start happens before the actor knows
which turn it serves, and the next turn links to it.

Frames arrive on the protocol loop, the turn's start and end on the actor thread: one turn
at a time per session, and the tool spans are touched on the loop only."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from actors.session.messages import TurnDone
from actors.session.outcomes import turn_outcome
from actors.session.recorder import StoreRecorder
from protocol import tracing
from protocol.agent.permissions import PermissionBroker
from protocol.tracing import TURN_SPANS, link_to
from state_machines import OutcomeStatus, outcome_status
from store import CommandRecord
from store.ownership import this_owner

T = TypeVar("T")


class TurnTrace:
    def __init__(self, session_id: str, agent_name: str) -> None:
        self._session_id = session_id
        self._agent = agent_name
        self._span: Span | None = None
        self._tools: dict[str, Span] = {}
        self._agent_start: trace.SpanContext | None = None

    @classmethod
    def attached(cls, recorder: StoreRecorder, agent_name: str) -> TurnTrace:
        traced = cls(recorder.session_id, agent_name)
        recorder.watchers.append(traced.on_frame)
        return traced

    def agent_start(self, start: Callable[[], T]) -> T:
        """Run the agent's start in a span of its own (the next turn links to it)."""
        with tracing.TRACER.start_as_current_span(
            "acp.agent_start",
            attributes={"acpctl.session.id": self._session_id, "gen_ai.agent.name": self._agent},
        ) as span:
            self._agent_start = span.get_span_context()
            return start()

    def start(
        self,
        claimed: list[CommandRecord],
        metadata: dict[str, Any],
        broker: PermissionBroker | None,
    ) -> None:
        first = claimed[0]
        links = link_to(metadata.get("traceParent"))
        if self._agent_start is not None and self._agent_start.is_valid:
            links.append(trace.Link(self._agent_start, {"acpctl.link": "agent_start"}))
            self._agent_start = None
        started = first.started_at or first.created_at
        span = tracing.TRACER.start_span(
            f"invoke_agent {self._agent}",
            links=links,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self._agent,
                "gen_ai.conversation.id": self._session_id,
                "acpctl.session.id": self._session_id,
                "acpctl.command.id": first.id,
                "acpctl.command.ids": [c.id for c in claimed],
                "acpctl.node": this_owner(),
                "acpctl.attempt": first.attempts,
                "acpctl.queue_wait_s": max(0.0, (started - first.created_at).total_seconds()),
            },
        )
        self._span = span
        TURN_SPANS[self._session_id] = span
        if broker is not None:
            broker.trace_context = trace.set_span_in_context(span)

    def end(self, message: TurnDone) -> None:
        span, self._span = self._span, None
        TURN_SPANS.pop(self._session_id, None)
        if span is None:
            return
        now = time.time_ns()
        for tool in self._tools.values():  # the turn ended under them
            tool.set_status(Status(StatusCode.ERROR, "the turn ended first"))
            tool.end(now)
        self._tools.clear()
        result = message.result
        if result is None or message.error is not None:
            span.set_attribute("acpctl.outcome", "failed")
            span.set_status(Status(StatusCode.ERROR, str(message.error or "the turn failed")))
            span.end(now)
            return
        usage = result.usage or {}
        for key, name in (("inputTokens", "input_tokens"), ("outputTokens", "output_tokens")):
            if isinstance(usage.get(key), int):
                span.set_attribute(f"gen_ai.usage.{name}", usage[key])
        if isinstance(usage.get("model"), str):
            span.set_attribute("gen_ai.response.model", usage["model"])
        # The same word the turn's command gets (OutcomeStatus), from the same rule.
        outcome, final, _ = turn_outcome(result, "", None)
        status = outcome_status(final, outcome)
        span.set_attribute("acpctl.stop_reason", result.stop_reason)
        span.set_attribute("acpctl.outcome", str(status))
        span.set_attribute("acpctl.interrupted", False)
        if status is OutcomeStatus.TIMEOUT:
            span.set_status(Status(StatusCode.ERROR, "the turn timed out"))
        span.end(now)

    def on_frame(self, frame: dict[str, Any]) -> None:
        """A frame from the agent (on the protocol loop): tool calls open and close spans."""
        try:
            update = frame["params"]["update"]
            kind = update["sessionUpdate"]
        except (KeyError, TypeError):
            return
        if kind not in ("tool_call", "tool_call_update") or self._span is None:
            return
        call_id = str(update.get("toolCallId") or "")
        tool = self._tools.get(call_id)
        if tool is None:
            name = update.get("title") or update.get("kind") or "tool"
            tool = tracing.TRACER.start_span(
                f"execute_tool {name}",
                context=trace.set_span_in_context(self._span),
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.call.id": call_id,
                    "gen_ai.tool.name": str(name),
                    "acpctl.tool.kind": str(update.get("kind") or ""),
                },
            )
            self._tools[call_id] = tool
        status = update.get("status")
        if status in ("completed", "failed"):
            tool.set_attribute("acpctl.tool.status", status)
            if status == "failed":
                tool.set_status(Status(StatusCode.ERROR, "the tool call failed"))
            tool.end()
            del self._tools[call_id]
