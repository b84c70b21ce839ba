"""The store's Prometheus metrics (``docs/observability.md``): how long group commits take
and how many writes each carries, and what the store refused.

Module-level objects in the process's default registry, as the Prometheus client intends:
a process has one store writer per open store, and their figures add up."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Histogram

from state_machines import BudgetExceeded, outcome_status
from state_machines.outcome_status import STATUS_FROM_RESULT
from store.records import CommandKind, CommandRecord

if TYPE_CHECKING:
    from store.usage import Usage

COMMIT_SECONDS = Histogram(
    "acpctl_store_commit_seconds",
    "Time of one group commit (the transaction and its fsync), seconds.",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0),
)
COMMIT_GROUP_SIZE = Histogram(
    "acpctl_store_commit_group_size",
    "Writes carried by one group commit.",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
)
WRITES_REFUSED = Counter(
    "acpctl_store_writes_refused_total",
    "Writes the store refused (locked past the timeout, disk full, I/O, a damaged file).",
)
BUDGET_REFUSALS = Counter(
    "acpctl_budget_refusals_total",
    "Prompts and spawns refused because a budget stopped the session.",
)


def write_failed(exc: BaseException) -> None:
    """A write ended with ``exc`` after its last attempt: counted here, once, and not inside
    the write, which runs again when its group is retried (a PostgreSQL serialization
    conflict reruns every write of the group)."""
    if isinstance(exc, BudgetExceeded):
        BUDGET_REFUSALS.inc()


BUDGET_STOPS = Counter(
    "acpctl_budget_stops_total", "Sessions a budget stopped, by budget.", ["budget"]
)
TOKENS = Counter(
    "acpctl_tokens_total", "Tokens agents reported, by kind (input, output).", ["kind"]
)


def tokens_counted(used: Usage) -> None:
    """A turn's tokens, counted after the commit that records them (``after_commit``)."""
    TOKENS.labels("input").inc(used.input_tokens)
    TOKENS.labels("output").inc(used.output_tokens)


_SECONDS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800)
TURNS = Counter("acpctl_turns_total", "Finished prompt commands, by outcome status.", ["status"])
_TURNS_BY_STATUS: dict[str, Any] = {}  # TURNS' child per status label
TURN_SECONDS = Histogram(
    "acpctl_turn_duration_seconds",
    "From a prompt's claim to its outcome, seconds.",
    buckets=_SECONDS,
)
QUEUE_WAIT_SECONDS = Histogram(
    "acpctl_queue_wait_seconds",
    "From a prompt being queued to its turn starting, seconds.",
    buckets=(0.005, 0.01, 0.05, *_SECONDS),
)


def commands_finished(records: Sequence[CommandRecord]) -> None:
    """After a commit: the prompts that reached a final state in it (once each, committed).
    On the writer thread, so kept lean: the result is parsed only where it decides the
    status, and each status's counter is looked up once per process."""
    now = time.time()
    for record in records:
        if record.kind is not CommandKind.PROMPT:
            continue
        state = record.state
        status = outcome_status(state, record.result if state in STATUS_FROM_RESULT else None)
        label = status.value if status is not None else state.value
        counter = _TURNS_BY_STATUS.get(label)
        if counter is None:
            counter = _TURNS_BY_STATUS.setdefault(label, TURNS.labels(label))
        counter.inc()
        started = record.started_ts
        if started is not None:
            QUEUE_WAIT_SECONDS.observe(max(0.0, started - record.created_ts))
            finished = record.finished_ts or now
            TURN_SECONDS.observe(max(0.0, finished - started))
