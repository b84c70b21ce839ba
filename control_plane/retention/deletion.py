"""A claimed tree deleted a short transaction at a time (store/ops/retention.py says what
goes in which order and why a crash between two transactions is safe)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from control_plane.retention.pacing import Pacer, paced_write
from store import Store
from store.faults import fault_point
from store.ops import retention as retention_ops


@dataclass
class DeletionStats:
    rows: int = 0
    events: int = 0
    transactions: int = 0
    finished: bool = False  # False: stopped before the tree was gone (the next gc ends it)


def delete_tree(
    store: Store,
    children_first: Sequence[str],
    pacer: Pacer,
    after_each: Callable[[], None] | None = None,
) -> DeletionStats:
    """Delete the claimed sessions (children before parents) until none is left or the
    pacer says stop; ``after_each`` runs after every transaction (a WAL checkpoint)."""
    stats = DeletionStats()
    pending = list(children_first)
    while pending:
        result, lock_s = paced_write(
            store,
            pacer,
            "rows",
            # ``pending`` is only changed after the write returned.
            lambda ctx, rows, deadline: retention_ops.delete_some(ctx, pending, rows, deadline),
            lambda done: done.rows,
        )
        stats.transactions += 1
        stats.rows += result.rows
        stats.events += result.events
        del pending[: result.sessions_done]
        fault_point("retention.between_transactions")
        if after_each is not None:
            after_each()
        if pending and not pacer.rest(lock_s):
            return stats
    stats.finished = True
    return stats
