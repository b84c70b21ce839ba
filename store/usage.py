"""Token usage and budgets: the records (the transactions are in ``store/ops/budgets.py``).

Usage is what agents report: a prompt response's ``usage`` (tokens of that turn) and
``usage_update`` notifications (``cost``: the session's cumulative cost, reported while a
turn runs). It is accumulated per session in the ``session_usage`` table; a tree's or a
batch's usage is the sum over its sessions.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class BudgetAction(StrEnum):
    WARN = "warn"  # a budget_warning event, once; nothing is stopped
    STOP = "stop"  # cancel the running turn, refuse further prompts and children, for good


class BudgetScope(StrEnum):
    SESSION = "session"
    TREE = "tree"  # a root session and all its descendants
    BATCH = "batch"  # every task session of one batch run


@dataclass(frozen=True)
class Budget:
    """At most ``tokens`` (total tokens the agent reported) and/or ``cost_usd``."""

    tokens: int | None = None
    cost_usd: float | None = None
    action: BudgetAction = BudgetAction.STOP

    def __post_init__(self) -> None:
        if self.tokens is None and self.cost_usd is None:
            raise ValueError("a budget needs tokens or cost_usd")
        if (self.tokens is not None and self.tokens < 0) or (
            self.cost_usd is not None and self.cost_usd < 0
        ):
            raise ValueError("a budget cannot be negative")
        object.__setattr__(self, "action", BudgetAction(self.action))

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"action": self.action.value}
        if self.tokens is not None:
            found["tokens"] = self.tokens
        if self.cost_usd is not None:
            found["costUsd"] = self.cost_usd
        return found

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Budget:
        return cls(value.get("tokens"), value.get("costUsd"), value.get("action", "stop"))


@dataclass(frozen=True)
class Price:
    """USD per million tokens, for agents that report tokens but no cost."""

    input_usd_per_mtok: float
    output_usd_per_mtok: float

    def __post_init__(self) -> None:
        if self.input_usd_per_mtok < 0 or self.output_usd_per_mtok < 0:
            raise ValueError("a price cannot be negative")

    def cost(self, usage: Usage) -> float:
        return (
            usage.input_tokens * self.input_usd_per_mtok
            + usage.output_tokens * self.output_usd_per_mtok
        ) / 1_000_000


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.total_tokens + other.total_tokens,
            self.cost_usd + other.cost_usd,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "totalTokens": self.total_tokens,
            "costUsd": self.cost_usd,
        }


@dataclass(frozen=True)
class BudgetStop:
    """Why a session is stopped: the budget's name (``<scope> tokens`` or ``<scope>
    cost_usd``), its limit and what was used when it was reached."""

    budget: str
    limit: float
    used: float

    def to_json(self) -> dict[str, Any]:
        return {"budget": self.budget, "limit": self.limit, "used": self.used}


@dataclass(frozen=True)
class SessionUsage:
    session_id: str
    usage: Usage
    stopped: BudgetStop | None


def turn_usage(reported: dict[str, Any] | None) -> Usage:
    """Tokens of one turn from a prompt response's ``usage`` (ACP: inputTokens,
    outputTokens, totalTokens; a missing total is the sum)."""
    if not isinstance(reported, dict):
        return Usage()

    def count(name: str) -> int:
        value = reported.get(name)
        return value if isinstance(value, int) and value >= 0 else 0

    inputs, outputs = count("inputTokens"), count("outputTokens")
    total = count("totalTokens") or inputs + outputs
    return Usage(inputs, outputs, total)


def reported_cost(update: dict[str, Any]) -> float | None:
    """The cumulative session cost in USD a ``usage_update`` carries (``cost.amount``), if
    any. Costs in another currency are not counted against a ``cost_usd`` budget."""
    cost = update.get("cost")
    if not isinstance(cost, dict) or cost.get("currency", "USD") != "USD":
        return None
    amount = cost.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
        return None
    return float(amount)


def usage_update_cost(frame: dict[str, Any]) -> float | None:
    """The cost a ``session/update`` frame reports when it is a ``usage_update``; runs for
    every update of every turn, so one ``try`` instead of a check per level."""
    try:
        update = frame["params"]["update"]
        if update["sessionUpdate"] != "usage_update":
            return None
    except (KeyError, TypeError):
        return None
    return reported_cost(update) if isinstance(update, dict) else None
