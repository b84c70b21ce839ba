"""Token and cost budgets in front of the real agents (Claude Code, Codex, Gemini CLI): what
each agent reports through ACP for a turn is what the control plane counts, and a budget
stops a session on exactly that, never on an estimate (docs/observability.md).

What the agents report for one ``SAY`` turn against the stand-in model server (which answers
every model call with 10 input and 5 output tokens), measured with claude-agent-acp 0.23.1,
codex-acp 0.16.0 and Gemini CLI 0.61.0:

* Claude Code: the ``session/prompt`` response has ``usage`` (``inputTokens`` 10,
  ``outputTokens`` 5, ``cachedReadTokens`` 0, ``cachedWriteTokens`` 0, ``totalTokens`` 15) and
  one ``usage_update`` before it with ``used`` 11, ``size`` 200000 and ``cost`` ``{amount:
  0.000105, currency: USD}`` (cumulative: 0.00021 after the second turn). Both are counted.
* Codex: no ``usage`` in the response; one ``usage_update`` with ``used`` 15 and ``size``
  258400, no ``cost``. ``used`` is the context size, not consumption, so nothing is counted.
* Gemini CLI: no ``usage`` in the response and no ``usage_update``; its tokens are in the
  response's ``_meta.quota.token_count`` (``input_tokens`` 10, ``output_tokens`` 5), which the
  control plane reads as the turn's usage (``protocol/agent/usage.py``), so tokens are
  counted and token budgets act; there is no cost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from acp import text_block

from actors.agent_profiles import AgentProfile, AgentProfiles
from actors.settings import RuntimeSettings
from control_plane import (
    AgentSpec,
    Budget,
    BudgetExceeded,
    CommandState,
    ControlPlane,
    Decision,
    PermissionPolicy,
)
from store.usage import BudgetStop, Usage

from .client import RecordingClient, agent_connection
from .conftest import RealAgent

pytestmark = pytest.mark.timeout(90)

# Agents whose reports the control plane counts: tokens at the turn's end, cost mid-turn.
COUNTS_TOKENS = {"claude", "gemini"}
COUNTS_COST = {"claude"}


def _settings(real_agent: RealAgent, tmp_path: Path) -> RuntimeSettings:
    profile = AgentProfile(env=dict(real_agent.launch.env), fs=real_agent.name != "gemini")
    return RuntimeSettings(
        permission_policy=PermissionPolicy(Decision.ALLOW),
        turn_timeout_s=60,
        cancel_grace_s=2,
        sweep_interval_s=0.2,
        agent_shutdown_timeout_s=2,
        agent_profiles=AgentProfiles({real_agent.name: profile}),
        log_dir=str(tmp_path / "agent-logs"),
    )


@contextmanager
def _control_plane(real_agent: RealAgent, tmp_path: Path) -> Iterator[ControlPlane]:
    settings = _settings(real_agent, tmp_path)
    with ControlPlane.open(tmp_path / "cp.db", settings=settings, subagent_tools=False) as cp:
        yield cp


def _spec(real_agent: RealAgent) -> AgentSpec:
    launch = real_agent.launch
    return AgentSpec(real_agent.name, tuple(launch.argv), env=tuple(launch.env.items()))


@dataclass(frozen=True)
class Reported:
    """What the agent sent in one session, from the control plane's verbatim event log:
    each turn's ``usage`` (prompt response) and each ``usage_update``."""

    turn_usages: list[dict[str, Any]]
    usage_updates: list[dict[str, Any]]

    @property
    def costs(self) -> list[float]:
        return [
            float(u["cost"]["amount"])
            for u in self.usage_updates
            if isinstance(u.get("cost"), dict) and u["cost"].get("currency", "USD") == "USD"
        ]


def _reported(cp: ControlPlane, session_id: str) -> Reported:
    turns, updates = [], []
    for e in cp.events(session_id):
        if e.kind == "turn_ended" and e.payload.get("usage") is not None:
            turns.append(e.payload["usage"])
        elif e.kind == "session_update":
            update = (e.payload.get("params") or {}).get("update") or {}
            if update.get("sessionUpdate") == "usage_update":
                updates.append(update)
    return Reported(turns, updates)


def _kinds(cp: ControlPlane, session_id: str) -> list[str]:
    return [e.kind for e in cp.events(session_id)]


def _assert_counted(cp: ControlPlane, session_id: str, name: str, cancelled: bool = False) -> Usage:
    """The control plane's count of the session is exactly what the agent reported (a turn
    the control plane ``cancelled``: Claude Code answers it without ``usage``)."""
    reported, used = _reported(cp, session_id), cp.usage(session_id)
    if name in COUNTS_TOKENS:
        assert reported.turn_usages or cancelled, reported
        assert all(u["totalTokens"] > 0 for u in reported.turn_usages), reported
        want = [sum(u.get(f, 0) for u in reported.turn_usages) for f in _TOKEN_FIELDS]
        assert [used.input_tokens, used.output_tokens, used.total_tokens] == want
        assert used.total_tokens > 0 or cancelled
    if name in COUNTS_COST:
        assert reported.costs and all(c > 0 for c in reported.costs), reported
        # Claude Code reports the session's cumulative cost: the highest one is kept.
        assert used.cost_usd == pytest.approx(max(reported.costs))
    if name == "codex":
        # Codex reports no usage through ACP that the control plane counts: no ``usage`` in
        # the prompt response, and usage_update frames with only ``used`` (the context size,
        # which is not consumption) and ``size``, never a ``cost``.
        assert reported.turn_usages == []
        assert reported.usage_updates, "codex-acp sends a usage_update per turn"
        assert all(u.get("used", 0) > 0 and u.get("size", 0) > 0 for u in reported.usage_updates)
        assert reported.costs == []
        assert used == Usage()
    if name == "gemini":
        # Gemini CLI reports its tokens only in the prompt response's _meta.quota (see
        # test_what_each_agent_reports_through_acp): the turn's usage says where it came from.
        assert reported.usage_updates == []
        assert all(u.get("source") == "_meta.quota.token_count" for u in reported.turn_usages)
        assert used.cost_usd == 0.0
    return used


_TOKEN_FIELDS = ("inputTokens", "outputTokens", "totalTokens")


def _unbudgeted_session_still_works(cp: ControlPlane, real_agent: RealAgent) -> None:
    other = cp.spawn(_spec(real_agent), real_agent.cwd, "SAY no budget here")
    assert other.command is not None
    first = cp.wait(other.command.id, 60)
    assert first.ok, first
    assert "no budget here" in first.text
    then = cp.wait(cp.prompt(other.session.id, "SAY and once more").id, 60)
    assert then.ok, then
    assert cp.budget_stop(other.session.id) is None
    _assert_counted(cp, other.session.id, real_agent.name)


def test_a_token_budget_stops_on_the_tokens_the_agent_reported(
    real_agent: RealAgent, tmp_path: Path
) -> None:
    name = real_agent.name
    with _control_plane(real_agent, tmp_path) as cp:
        spawned = cp.spawn(
            _spec(real_agent), real_agent.cwd, "SAY hello budget", budget=Budget(tokens=1)
        )
        assert spawned.command is not None
        sid = spawned.session.id
        outcome = cp.wait(spawned.command.id, 60)
        # A token budget acts at the turn's end: the turn that reached it completes.
        assert outcome.ok, outcome
        assert "hello budget" in outcome.text
        used = _assert_counted(cp, sid, name)
        if name in COUNTS_TOKENS:
            assert outcome.usage is not None and outcome.usage["totalTokens"] == used.total_tokens
            # Counted in the transaction that recorded the outcome: stopped already.
            assert cp.budget_stop(sid) == BudgetStop("session tokens", 1, used.total_tokens)
            assert "budget_exceeded" in _kinds(cp, sid)
            with pytest.raises(BudgetExceeded) as refused:
                cp.prompt(sid, "SAY one more")
            assert (refused.value.session_id, refused.value.budget) == (sid, "session tokens")
            assert refused.value.used == used.total_tokens
            assert len(cp.commands(sid)) == 1  # the refused prompt wrote nothing
        else:
            # This agent reports no token usage the control plane counts (see
            # _assert_counted): usage stays zero, the budget is never reached, nothing stops.
            assert outcome.usage is None
            assert cp.budget_stop(sid) is None
            assert "budget_exceeded" not in _kinds(cp, sid)
            again = cp.wait(cp.prompt(sid, "SAY still going").id, 60)
            assert again.ok, again
            assert _assert_counted(cp, sid, name) == Usage()
            assert cp.budget_stop(sid) is None
        _unbudgeted_session_still_works(cp, real_agent)


def test_a_cost_budget_stops_on_the_cost_the_agent_reported(
    real_agent: RealAgent, tmp_path: Path
) -> None:
    name, limit = real_agent.name, 0.00005  # below one SAY turn's cost with Claude Code
    with _control_plane(real_agent, tmp_path) as cp:
        spawned = cp.spawn(
            _spec(real_agent), real_agent.cwd, "SAY hello cost", budget=Budget(cost_usd=limit)
        )
        assert spawned.command is not None
        sid = spawned.session.id
        outcome = cp.wait(spawned.command.id, 60)
        if name in COUNTS_COST:
            # The cost arrives in a usage_update just before the prompt response: the stop
            # cancels the turn if it is still running then, else the turn has just completed.
            assert outcome.state in (CommandState.COMPLETED, CommandState.CANCELLED), outcome
            used = _assert_counted(cp, sid, name, outcome.state is CommandState.CANCELLED)
            assert used.cost_usd > limit
            stop = cp.budget_stop(sid)
            assert stop is not None, _kinds(cp, sid)
            assert (stop.budget, stop.limit) == ("session cost_usd", limit)
            assert stop.used == pytest.approx(used.cost_usd)
            assert "budget_exceeded" in _kinds(cp, sid)
            with pytest.raises(BudgetExceeded) as refused:
                cp.prompt(sid, "SAY one more")
            assert (refused.value.session_id, refused.value.budget) == (sid, "session cost_usd")
        else:
            # This agent reports no cost through ACP (see _assert_counted): the cost stays
            # zero, the budget is never reached, the session keeps working.
            assert outcome.ok, outcome
            assert _assert_counted(cp, sid, name).cost_usd == 0.0
            assert cp.budget_stop(sid) is None
            again = cp.wait(cp.prompt(sid, "SAY still going").id, 60)
            assert again.ok, again
            assert cp.budget_stop(sid) is None


def test_what_each_agent_reports_through_acp(real_agent: RealAgent) -> None:
    """The agent on its own, without the control plane: the usage shapes the tests above
    rely on (the module docstring has the measured values)."""
    client = RecordingClient(real_agent.cwd)

    async def run() -> Any:
        async with agent_connection(real_agent.launch, client, real_agent.cwd) as (conn, _, _i):
            new = await asyncio.wait_for(
                conn.new_session(cwd=str(real_agent.cwd), mcp_servers=[]), 60
            )
            client.clear()
            return await asyncio.wait_for(
                conn.prompt(session_id=new.session_id, prompt=[text_block("SAY hello")]), 60
            )

    resp = asyncio.run(run())
    assert resp.stop_reason == "end_turn"
    updates = [
        u.model_dump(by_alias=True, exclude_none=True)
        for u in client.updates
        if u.session_update == "usage_update"
    ]
    usage = None if resp.usage is None else resp.usage.model_dump(by_alias=True)
    meta = resp.field_meta or {}
    if real_agent.name == "claude":
        assert usage is not None and usage["totalTokens"] > 0, usage
        assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0, usage
        assert [set(u) >= {"used", "size", "cost"} for u in updates] == [True], updates
        assert updates[0]["cost"]["currency"] == "USD" and updates[0]["cost"]["amount"] > 0
    elif real_agent.name == "codex":
        assert usage is None
        assert updates and all("cost" not in u and u["used"] > 0 for u in updates), updates
    else:
        assert usage is None and updates == []
        # Gemini CLI's tokens, in a ``_meta`` extension the control plane reads as usage.
        tokens = meta["quota"]["token_count"]
        assert tokens["input_tokens"] > 0 and tokens["output_tokens"] > 0, meta
