"""Token and cost budgets: a runaway session is stopped, refused from then on (across a
kill -9), and nothing else is affected."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from control_plane import BudgetExceeded, CommandState, ControlPlane, SessionState
from store.ops.budgets import BudgetDefaults
from store.usage import Budget, BudgetAction, Price
from tests.conftest import eventually
from tests.support.cp_harness import example_agent, open_cp


def _kinds(cp: ControlPlane, session_id: str) -> list[str]:
    return [e.kind for e in cp.events(session_id)]


def test_a_token_budget_stops_the_session_after_the_turn_that_reached_it(
    tmp_path: Path, db: str
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        agent = example_agent(tmp_path)
        spawned = cp.spawn(agent, tmp_path, "#chunks=20 hello", budget=Budget(tokens=10))
        other = cp.spawn(agent, tmp_path, "#chunks=20 hello")  # no budget
        assert spawned.command is not None and other.command is not None
        sid = spawned.session.id
        assert cp.wait(spawned.command.id, 30).ok  # its tokens are known at its end
        assert cp.usage(sid).total_tokens == 22  # 2 words in, 20 chunks out
        stop = cp.budget_stop(sid)
        assert stop is not None and (stop.budget, stop.limit, stop.used) == (
            "session tokens",
            10,
            22,
        )
        assert "budget_exceeded" in _kinds(cp, sid)
        with pytest.raises(BudgetExceeded) as refused:
            cp.prompt(sid, "one more")
        assert (refused.value.budget, refused.value.session_id) == ("session tokens", sid)
        assert len(cp.commands(sid)) == 1  # the refused prompt wrote nothing
        # nothing else is affected
        assert cp.wait(other.command.id, 30).ok
        assert cp.wait(cp.prompt(other.session.id, "fine").id, 30).ok
        assert cp.budget_stop(other.session.id) is None
        assert cp.get(sid).state is not SessionState.CLOSED  # stopped, readable, closable


def test_a_cost_budget_cancels_the_running_turn_that_crosses_it(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        spawned = cp.spawn(
            example_agent(tmp_path),
            tmp_path,
            "#chunks=200 #delay=20 #cost=0.01 spend",
            budget=Budget(cost_usd=0.05),
        )
        assert spawned.command is not None
        outcome = cp.wait(spawned.command.id, 60)
        assert outcome.state is CommandState.CANCELLED  # stopped mid-turn
        assert outcome.text.count("chunk") < 100  # long before its 200 chunks
        stop = cp.budget_stop(spawned.session.id)
        assert stop is not None and stop.budget == "session cost_usd" and stop.used >= 0.05
        with pytest.raises(BudgetExceeded):
            cp.prompt(spawned.session.id, "again")


def test_queued_prompts_are_cancelled_when_the_budget_stops_the_session(
    tmp_path: Path, db: str
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        spawned = cp.spawn(
            example_agent(tmp_path), tmp_path, "#chunks=30 #delay=10 a", budget=Budget(tokens=5)
        )
        sid = spawned.session.id
        queued = cp.prompt(sid, "queued behind it")
        assert cp.wait(queued.id, 30).state is CommandState.CANCELLED
        assert "budget exceeded" in (cp.command(queued.id).error or "")


def test_a_tree_budget_stops_the_whole_tree_and_refuses_new_children(
    tmp_path: Path, db: str
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        agent = example_agent(tmp_path)
        root = cp.spawn(agent, tmp_path, "#chunks=5 root", tree_budget=Budget(tokens=40))
        assert root.command is not None and cp.wait(root.command.id, 30).ok
        rid = root.session.id
        assert cp.budget_stop(rid) is None  # 7 tokens so far
        child = cp.spawn(agent, tmp_path, "#chunks=40 child", parent=rid, announce=False)
        assert child.command is not None and cp.wait(child.command.id, 30).ok
        eventually(lambda: cp.budget_stop(rid) is not None)
        assert cp.usage(rid, tree=True).total_tokens == 7 + 42
        for sid in (rid, child.session.id):
            stop = cp.budget_stop(sid)
            assert stop is not None and stop.budget == "tree tokens"
        with pytest.raises(BudgetExceeded):
            cp.spawn(agent, tmp_path, "another", parent=rid)
        with pytest.raises(BudgetExceeded):
            cp.prompt(rid, "more")


def test_a_warn_budget_logs_once_and_stops_nothing(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        spawned = cp.spawn(
            example_agent(tmp_path),
            tmp_path,
            "#chunks=10 a",
            budget=Budget(tokens=5, action=BudgetAction.WARN),
        )
        sid = spawned.session.id
        assert spawned.command is not None and cp.wait(spawned.command.id, 30).ok
        assert cp.wait(cp.prompt(sid, "#chunks=10 b").id, 30).ok
        assert _kinds(cp, sid).count("budget_warning") == 1
        assert cp.budget_stop(sid) is None


def test_the_configured_default_applies_when_the_spawn_sets_none(tmp_path: Path, db: str) -> None:
    defaults = BudgetDefaults(session=Budget(tokens=3))
    with open_cp(tmp_path, db=db, budgets=defaults) as cp:
        spawned = cp.spawn(example_agent(tmp_path), tmp_path, "#chunks=5 x")
        assert spawned.command is not None and cp.wait(spawned.command.id, 30).ok
        with pytest.raises(BudgetExceeded, match="session tokens"):
            cp.prompt(spawned.session.id, "y")
        # a spawn's own budget wins over the default
        roomy = cp.spawn(example_agent(tmp_path), tmp_path, "#chunks=5 x", budget=Budget(100))
        assert roomy.command is not None and cp.wait(roomy.command.id, 30).ok
        assert cp.wait(cp.prompt(roomy.session.id, "y").id, 30).ok


@pytest.mark.parametrize(
    ("tokens", "cost"), [(None, None), (-1, None), (None, -0.5)], ids=["empty", "neg", "negcost"]
)
def test_a_budget_without_a_limit_or_with_a_negative_one_is_refused(
    tokens: int | None, cost: float | None
) -> None:
    with pytest.raises(ValueError):
        Budget(tokens, cost)


DRIVER = """
import sys, time
from pathlib import Path
from store.usage import Budget
from tests.support.cp_harness import example_agent, open_cp
tmp = Path(sys.argv[1])
cp = open_cp(tmp, sys.argv[2])
spawned = cp.spawn(example_agent(tmp), tmp, "#chunks=8 go", budget=Budget(tokens=4),
                   idempotency_key="budgeted")
cp.wait(spawned.command.id, 60)
while cp.budget_stop(spawned.session.id) is None:
    time.sleep(0.05)
print(spawned.session.id, flush=True)
time.sleep(120)
"""


def test_the_stop_survives_a_kill_9_and_a_reopen(tmp_path: Path, db: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path), db],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    sid = proc.stdout.readline().strip()
    assert sid
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    with open_cp(tmp_path, db=db) as cp:
        with pytest.raises(BudgetExceeded, match="session tokens"):
            cp.prompt(sid, "after the restart")
        stop = cp.budget_stop(sid)
        assert stop is not None and stop.used == 10


def test_settings_without_budgets_stop_nothing(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        assert cp.settings.budgets == BudgetDefaults()
        spawned = cp.spawn(example_agent(tmp_path), tmp_path, "#chunks=50 #cost=1 big")
        assert spawned.command is not None and cp.wait(spawned.command.id, 30).ok
        assert cp.usage(spawned.session.id).cost_usd == pytest.approx(50.0)
        assert cp.budget_stop(spawned.session.id) is None


def test_replace_keeps_budget_defaults_frozen() -> None:
    defaults = BudgetDefaults(session=Budget(tokens=1))
    assert replace(defaults, tree=Budget(cost_usd=1.0)).session == Budget(tokens=1)


def test_the_price_table_costs_tokens_of_agents_that_report_no_cost(
    tmp_path: Path, db: str
) -> None:
    # $1 per input token and $2 per output token, for the example agent by its name
    prices = {"example-agent": Price(1_000_000, 2_000_000)}
    with open_cp(tmp_path, db=db, budgets=BudgetDefaults(prices=prices)) as cp:
        agent = example_agent(tmp_path)
        priced = cp.spawn(agent, tmp_path, "#chunks=5 x", budget=Budget(cost_usd=10))
        assert priced.command is not None and cp.wait(priced.command.id, 30).ok
        assert cp.usage(priced.session.id).cost_usd == pytest.approx(2 * 1 + 5 * 2)
        stop = cp.budget_stop(priced.session.id)
        assert stop is not None and stop.budget == "session cost_usd" and stop.used == 12
        # an agent that reports its cost is taken at its word, never priced on top
        reported = cp.spawn(agent, tmp_path, "#chunks=3 #cost=0.5 y")
        assert reported.command is not None and cp.wait(reported.command.id, 30).ok
        assert cp.usage(reported.session.id).cost_usd == pytest.approx(1.5)
        assert cp.usage(reported.session.id, tree=False).total_tokens == 3 + 3


def test_a_negative_price_is_refused() -> None:
    with pytest.raises(ValueError):
        Price(-1.0, 1.0)
