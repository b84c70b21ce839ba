"""Usage accounting and budgets, inside the turn's own transactions.

A turn's reported tokens are added in the transaction that records its outcome, and the
budgets are checked there; a ``usage_update`` with a cost is recorded (and checked) while
the turn runs. A budget with action ``stop`` that is reached marks every session of its
scope stopped (``session_usage.stopped_by``), cancels their queued prompts and logs a
``budget_exceeded`` event in each; from then on ``raise_if_stopped`` refuses their prompts
and new children, across restarts. The caller cancels the running turns it is told about.
A ``warn`` budget logs one ``budget_warning`` per session and budget.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from state_machines import SessionNotFound, SessionState
from state_machines.event_kinds import EventKind
from store import hot_sql as hot
from store import queries, telemetry
from store.ops.commands import cancel_queued, raise_if_stopped
from store.ops.events import append_events
from store.records import NewEvent
from store.schema import session_usage
from store.usage import (
    Budget,
    BudgetAction,
    BudgetScope,
    BudgetStop,
    Price,
    Usage,
    turn_usage,
)
from store.writer import WriteContext

__all__ = [
    "BudgetDefaults",
    "ScopedBudget",
    "add_turn_usage",
    "apply",
    "budgets_of",
    "check",
    "raise_if_stopped",
    "record_cost",
    "stop",
]


@dataclass(frozen=True)
class BudgetDefaults:
    """Budgets from the configuration, for sessions whose spawn set none, and the price
    table (by model, else by agent name) for agents that report tokens but no cost."""

    session: Budget | None = None
    tree: Budget | None = None
    prices: Mapping[str, Price] = field(default_factory=dict)


@dataclass(frozen=True)
class ScopedBudget:
    scope: BudgetScope
    budget: Budget
    session_ids: tuple[str, ...]  # every session whose usage counts against it


def _add(
    ctx: WriteContext, session_id: str, usage: Usage, cost: float | None, priced: float = 0.0
) -> None:
    """Add ``usage`` (and ``priced``, its cost by the price table) to the session's row;
    ``cost`` (cumulative, as agents report it) replaces the stored cost when higher. Fixed
    SQL (store/hot_sql.py): this runs at every turn's end that reports tokens."""
    sql = hot.USAGE_ADD if cost is None else hot.USAGE_ADD_COST[ctx.conn.dialect.name]
    ctx.raw.execute(
        sql,
        (
            session_id,
            usage.input_tokens,
            usage.output_tokens,
            usage.total_tokens,
            0.0 if cost is None else cost,
            priced,
            time.time(),
        ),
    )


class _BudgetFacts(NamedTuple):
    """What decides a session's budgets and never changes after its spawn: its own budget
    (from its metadata), its tree's root and the root's tree budget (a session's parent,
    and so its root, is fixed at spawn; metadata is written once, by the spawn)."""

    own: dict[str, Any] | None
    root: str
    tree: dict[str, Any] | None


# Facts per session id, read once per process (the writer thread reads them at every turn's
# end that reports usage). Bounded: the oldest entries go first. A lock, because every open
# store's writer thread shares the dictionary.
_FACTS_MAX = 4096
_facts: OrderedDict[str, _BudgetFacts] = OrderedDict()
_facts_lock = threading.Lock()


def _budget_facts(ctx: WriteContext, session_id: str) -> _BudgetFacts:
    with _facts_lock:
        known = _facts.get(session_id)
    if known is not None:
        return known
    row = ctx.raw.execute(hot.SESSION_BUDGET_FACTS, (session_id,)).fetchone()
    if row is None:
        raise SessionNotFound(session_id)
    metadata_text, parent_id = row
    metadata = json.loads(metadata_text)
    root = queries.tree_root(ctx.conn, session_id) if parent_id is not None else session_id
    root_meta = metadata if root == session_id else queries.get_session(ctx.conn, root).metadata
    facts = _BudgetFacts(metadata.get("budget") or None, root, root_meta.get("treeBudget") or None)
    with _facts_lock:
        _facts[session_id] = facts
        if len(_facts) > _FACTS_MAX:
            _facts.popitem(last=False)
    return facts


def budgets_of(ctx: WriteContext, session_id: str, defaults: BudgetDefaults) -> list[ScopedBudget]:
    """The session's own budget (from its spawn, else the default) and its tree's (from the
    root's spawn, else the default), with the sessions each one counts. What decides them is
    read once per session and kept (``_budget_facts``): a session with no budget anywhere
    costs no read at all (this runs at every turn's end); a tree budget reads the tree's
    members each time (children come and go)."""
    facts = _budget_facts(ctx, session_id)
    found: list[ScopedBudget] = []
    session_budget = Budget.from_json(facts.own) if facts.own else defaults.session
    if session_budget is not None:
        found.append(ScopedBudget(BudgetScope.SESSION, session_budget, (session_id,)))
    tree_budget = Budget.from_json(facts.tree) if facts.tree else defaults.tree
    if tree_budget is not None:
        tree = (facts.root, *queries.descendants(ctx.conn, facts.root))
        found.append(ScopedBudget(BudgetScope.TREE, tree_budget, tree))
    return found


def _reached(scoped: ScopedBudget, used: Usage) -> BudgetStop | None:
    budget = scoped.budget
    if budget.tokens is not None and used.total_tokens >= budget.tokens:
        return BudgetStop(f"{scoped.scope.value} tokens", budget.tokens, used.total_tokens)
    if budget.cost_usd is not None and used.cost_usd >= budget.cost_usd:
        return BudgetStop(f"{scoped.scope.value} cost_usd", budget.cost_usd, used.cost_usd)
    return None


def check(ctx: WriteContext, session_id: str, budgets: Sequence[ScopedBudget]) -> list[str]:
    """Apply every budget that is reached; returns the sessions a stop budget just stopped
    (their running turns are for the caller to cancel)."""
    stopped: list[str] = []
    for scoped in budgets:
        reached = _reached(scoped, queries.usage_sum(ctx.conn, scoped.session_ids))
        if reached is None:
            continue
        if scoped.budget.action is BudgetAction.WARN:
            _warn_once(ctx, session_id, reached)
        else:
            stopped += stop(ctx, scoped.session_ids, reached)
    return stopped


def apply(ctx: WriteContext, scoped: ScopedBudget) -> tuple[BudgetStop | None, list[str]]:
    """One budget over its sessions, without a warning event (a batch reports it itself):
    what was reached, and the sessions a stop budget just stopped."""
    reached = _reached(scoped, queries.usage_sum(ctx.conn, scoped.session_ids))
    if reached is None or scoped.budget.action is BudgetAction.WARN:
        return reached, []
    return reached, stop(ctx, scoped.session_ids, reached)


def stop(ctx: WriteContext, session_ids: Sequence[str], reached: BudgetStop) -> list[str]:
    """Stop every open session of ``session_ids`` that is not stopped yet; returns them."""
    stopped = []
    text = json.dumps(reached.to_json())
    for sid in session_ids:
        if queries.session_usage(ctx.conn, sid).stopped is not None:
            continue
        if queries.get_session(ctx.conn, sid).state is SessionState.CLOSED:
            continue
        _add(ctx, sid, Usage(), None)  # the row exists from here on
        ctx.conn.execute(
            session_usage.update()
            .where(session_usage.c.session_id == sid)
            .values(stopped_by=text, updated_at=time.time())
        )
        cancel_queued(ctx, sid, f"budget exceeded: {reached.budget}")
        append_events(ctx, sid, None, [NewEvent(EventKind.BUDGET_EXCEEDED, reached.to_json())])
        # Counted once the stop is committed: a PostgreSQL group retried after a
        # serialization conflict runs this write again, and an isolated part may be undone.
        ctx.after_commit(telemetry.BUDGET_STOPS.labels(reached.budget).inc)
        stopped.append(sid)
    return stopped


def _warn_once(ctx: WriteContext, session_id: str, reached: BudgetStop) -> None:
    earlier = queries.events_of_kinds_after(
        ctx.conn, session_id, (EventKind.BUDGET_WARNING.value,), 0
    )
    if any(e.payload.get("budget") == reached.budget for e in earlier):
        return
    append_events(ctx, session_id, None, [NewEvent(EventKind.BUDGET_WARNING, reached.to_json())])


def add_turn_usage(
    ctx: WriteContext,
    session_id: str,
    reported: dict[str, Any] | None,
    defaults: BudgetDefaults,
) -> list[str]:
    """Count a finished turn's tokens and check the budgets; the sessions stopped."""
    used = turn_usage(reported)
    if used != Usage():  # an agent that reports nothing costs no write
        price = _price_of(ctx, session_id, reported, defaults.prices)
        _add(ctx, session_id, used, None, 0.0 if price is None else price.cost(used))
        ctx.after_commit(lambda: telemetry.tokens_counted(used))  # once, when committed
    return check(ctx, session_id, budgets_of(ctx, session_id, defaults))


def _price_of(
    ctx: WriteContext,
    session_id: str,
    reported: dict[str, Any] | None,
    prices: Mapping[str, Price],
) -> Price | None:
    """The price for this turn: by the model the agent reported, else by the agent's name."""
    if not prices:
        return None
    model = (reported or {}).get("model")
    if isinstance(model, str) and model in prices:
        return prices[model]
    return prices.get(queries.get_session(ctx.conn, session_id).agent.name)


def record_cost(
    ctx: WriteContext, session_id: str, cost_usd: float, defaults: BudgetDefaults
) -> list[str]:
    """Record the session's cumulative cost reported mid-turn and check the budgets."""
    _add(ctx, session_id, Usage(), cost_usd)
    return check(ctx, session_id, budgets_of(ctx, session_id, defaults))
