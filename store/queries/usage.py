"""Reads of token usage and budget stops, and the store's levels for a metrics scrape."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, case, func, select

from state_machines import CommandState
from store.queries.commands import count_commands
from store.queries.events import delivery_lag
from store.queries.sessions import count_sessions_by_state
from store.schema import session_usage as usage_table
from store.usage import BudgetStop, SessionUsage, Usage

# A session's cost: what its agent reported when it reports one, else its tokens priced.
_COST = case((usage_table.c.cost_usd > 0, usage_table.c.cost_usd), else_=usage_table.c.priced_usd)


# Usage summed over the rows selected, in Usage's field order.
_SUMS = (
    func.coalesce(func.sum(usage_table.c.input_tokens), 0),
    func.coalesce(func.sum(usage_table.c.output_tokens), 0),
    func.coalesce(func.sum(usage_table.c.total_tokens), 0),
    func.coalesce(func.sum(_COST), 0.0),
)


def _summed(row: Sequence[Any]) -> Usage:
    return Usage(int(row[0]), int(row[1]), int(row[2]), float(row[3]))


def session_usage(conn: Connection, session_id: str) -> SessionUsage:
    """What the session's agent reported it used, and the budget that stopped it, if any."""
    row = conn.execute(select(usage_table).where(usage_table.c.session_id == session_id)).first()
    if row is None:
        return SessionUsage(session_id, Usage(), None)
    stopped = json.loads(row.stopped_by) if row.stopped_by else None
    return SessionUsage(
        session_id,
        Usage(
            row.input_tokens,
            row.output_tokens,
            row.total_tokens,
            row.cost_usd if row.cost_usd > 0 else row.priced_usd,
        ),
        None if stopped is None else BudgetStop(**stopped),
    )


def usage_sum(conn: Connection, session_ids: Sequence[str]) -> Usage:
    """The usage of several sessions together (a tree, a batch)."""
    total = Usage()
    for start in range(0, len(session_ids), 500):  # SQLite's bound-parameter limit
        chunk = session_ids[start : start + 500]
        row = conn.execute(select(*_SUMS).where(usage_table.c.session_id.in_(chunk))).one()
        total = total + _summed(row)
    return total


def usage_totals(conn: Connection) -> tuple[Usage, int]:
    """Every session's usage together, and how many sessions a budget stopped."""
    row = conn.execute(select(*_SUMS, func.count(usage_table.c.stopped_by))).one()
    return _summed(row), int(row[4])


@dataclass(frozen=True)
class StoreLevels:
    """The store's levels now, for a metrics scrape."""

    sessions_by_state: dict[str, int]
    queued_commands: int
    running_commands: int
    delivery_lag: list[tuple[str, str, int]]  # (binding, session, events behind)
    usage: Usage
    stopped_by_budget: int


def store_levels(conn: Connection) -> StoreLevels:
    usage, stopped = usage_totals(conn)
    return StoreLevels(
        count_sessions_by_state(conn),
        count_commands(conn, CommandState.QUEUED),
        count_commands(conn, CommandState.RUNNING),
        delivery_lag(conn),
        usage,
        stopped,
    )
