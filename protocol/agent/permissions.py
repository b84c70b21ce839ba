"""Permission policy for ``session/request_permission``.

A policy answers ``allow``, ``deny`` or ``ask`` per request: a default, overridden by rules
per tool kind (``read``, ``edit``, ``execute``, ...). ``ask`` hands the request to a callback
the host supplies (``acpctl serve`` forwards it to the connected ACP client). After a cancel,
every pending request is answered ``cancelled``, as ACP requires.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the SDK schema costs ~0.8 s to import; Decision and the policy need none
    from acp.schema import PermissionOption, RequestPermissionResponse, ToolCallUpdate
    from opentelemetry.context import Context


class Decision(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"


# The host's answer to an ``ask``: the option id chosen, or None for "cancelled". It is called
# with the control-plane session id when the broker was given one (every session's broker is:
# no host looks the agent's ACP id up in the store per request), else with the ACP id.
AskCallback = Callable[[str, "ToolCallUpdate", list["PermissionOption"]], Awaitable[str | None]]


@dataclass(frozen=True)
class PermissionPolicy:
    default: Decision = Decision.ASK
    by_kind: Mapping[str, Decision] = field(default_factory=dict)

    def decide(self, tool_call: ToolCallUpdate) -> Decision:
        kind = tool_call.kind or "other"
        return self.by_kind.get(str(kind), self.default)


def _pick(options: list[PermissionOption], kinds: tuple[str, ...]) -> str | None:
    for wanted in kinds:
        for option in options:
            if option.kind == wanted:
                return option.option_id
    return None


def selected(option_id: str) -> RequestPermissionResponse:
    from acp.schema import AllowedOutcome, RequestPermissionResponse

    return RequestPermissionResponse(
        outcome=AllowedOutcome(outcome="selected", option_id=option_id)
    )


def cancelled() -> RequestPermissionResponse:
    from acp.schema import DeniedOutcome, RequestPermissionResponse

    return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


class PermissionBroker:
    """Answers one connection's permission requests; lives on the protocol loop."""

    def __init__(
        self,
        policy: PermissionPolicy,
        ask: AskCallback | None = None,
        session_id: str | None = None,
    ) -> None:
        self.policy = policy
        self._ask = ask
        self.session_id = session_id  # the control-plane session this broker answers for
        self._pending: set[asyncio.Future[Any]] = set()
        self._cancelled = False
        self.answered: list[tuple[str, str]] = []  # (tool call id, outcome) for diagnostics
        # The running turn's span, set by the session's turn trace: waits are its children.
        self.trace_context: Context | None = None

    def turn_started(self) -> None:
        self._cancelled = False

    def cancel_pending(self) -> None:
        """Answer every pending request ``cancelled`` (called when the turn is cancelled)."""
        self._cancelled = True
        for future in list(self._pending):
            future.cancel()

    async def request(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        from protocol import tracing  # here: the policy alone needs no OpenTelemetry

        with tracing.TRACER.start_as_current_span(
            "acp.permission",
            context=self.trace_context,
            attributes={"gen_ai.tool.call.id": tool_call.tool_call_id},
        ) as span:
            response = await self._decide(session_id, tool_call, options)
            outcome = response.outcome
            label = getattr(outcome, "option_id", None) or outcome.outcome
            span.set_attribute("acpctl.permission.outcome", str(label))
        self.answered.append((tool_call.tool_call_id, str(label)))
        return response

    async def _decide(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        if self._cancelled:
            return cancelled()
        decision = self.policy.decide(tool_call)
        if decision is Decision.ASK and self._ask is None:
            decision = Decision.DENY  # nobody to ask: the safe answer
        if decision is Decision.ALLOW:
            option = _pick(options, ("allow_once", "allow_always"))
            return selected(option) if option else cancelled()
        if decision is Decision.DENY:
            option = _pick(options, ("reject_once", "reject_always"))
            return selected(option) if option else cancelled()
        assert self._ask is not None
        asked_for = self.session_id or session_id
        future = asyncio.ensure_future(self._ask(asked_for, tool_call, options))
        self._pending.add(future)
        try:
            choice = await future
        except asyncio.CancelledError:
            if self._cancelled:
                return cancelled()
            raise
        finally:
            self._pending.discard(future)
        valid = {o.option_id for o in options}
        return selected(choice) if choice in valid else cancelled()
