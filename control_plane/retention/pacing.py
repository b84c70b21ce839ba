"""How retention shares the write lock with live work.

Every write of the store goes through one writer (store/writer.py): while a deletion's
transaction runs, a turn's writes wait for it to commit. So deletion runs in many small
transactions, each sized to hold the lock about ``target_s`` (the next one's budget is
scaled from the measured lock time of the last: statements *and* commit, since deleting
rows dirties pages that the commit writes and syncs), with a deadline inside the
transaction as a guard, and rests between them (``rest_ratio`` times the lock it just
held), so a turn's write finds the lock free most of the time and waits for at most one
short transaction when it does not.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from store import Store
from store.writer import WriteContext

T = TypeVar("T")


@dataclass(frozen=True)
class Pace:
    """The knobs. The defaults hold the lock about 8 ms a transaction (a turn that meets
    one waits about that long; the ceiling is 50 ms) and leave it free two thirds of the
    time (bench/gc.py: resting only as long made the median turn 1.7x slower, twice as
    long 1.3x); 1,000,000 events go in 10-15 s of deletion (docs/store.md)."""

    target_s: float = 0.008
    rest_ratio: float = 2.0
    first_units: int = 500  # rows (or pages) the first transaction may take
    min_units: int = 16
    max_units: int = 100_000


@dataclass
class LockTimes:
    """Each deletion transaction's lock time: from its first statement to the end of its
    commit, on the writer thread (the commit is part of what other writes wait for)."""

    seconds: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.seconds.append(value)

    @property
    def count(self) -> int:
        return len(self.seconds)

    def quantile(self, q: float) -> float:
        """By the nearest rank; 0 for none."""
        if not self.seconds:
            return 0.0
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    def to_json(self) -> dict[str, float | int]:
        return {
            "count": self.count,
            "maxMs": round(max(self.seconds, default=0.0) * 1000, 2),
            "p99Ms": round(self.quantile(0.99) * 1000, 2),
        }


class Pacer:
    """Sizes transactions and rests between them; stops early once ``stop`` is set.
    ``between``: called between two transactions (a benchmark holds deletion there)."""

    def __init__(
        self,
        pace: Pace | None = None,
        stop: threading.Event | None = None,
        between: Callable[[], None] | None = None,
    ) -> None:
        self.pace = pace or Pace()
        self.stop = stop or threading.Event()
        self.between = between
        self.locks = LockTimes()
        self._units: dict[str, int] = {}

    def units(self, kind: str) -> int:
        """The budget of the next transaction deleting (or vacuuming) ``kind``."""
        return self._units.get(kind, self.pace.first_units)

    def record(self, kind: str, done: int, lock_s: float) -> None:
        """What a transaction did and how long it held the lock; sizes the next one of
        ``kind``."""
        self.locks.add(lock_s)
        budget = self.units(kind)
        informative = done >= max(self.pace.min_units, budget // 2)
        if lock_s > 0 and (informative or lock_s > self.pace.target_s):
            # Scaled by the measured rate, at most doubled or quartered at a time (one slow
            # transaction, a checkpoint say, must not swing the next one wildly). A small
            # tail that stayed under the target says nothing about the rate.
            wanted = max(done, 1) * self.pace.target_s / lock_s
            wanted = min(max(wanted, budget / 4), budget * 2)
            self._units[kind] = int(min(max(wanted, self.pace.min_units), self.pace.max_units))

    def rest(self, lock_s: float) -> bool:
        """Rest after a transaction; False once asked to stop."""
        if self.stop.wait(lock_s * self.pace.rest_ratio):
            return False
        if self.between is not None:
            self.between()
        return not self.stop.is_set()


def paced_write(
    store: Store,
    pacer: Pacer,
    kind: str,
    fn: Callable[[WriteContext, int, float], T],
    done_of: Callable[[T], int],
) -> tuple[T, float]:
    """One paced transaction: ``fn(ctx, budget, deadline)`` with the budget for ``kind``
    and a deadline (``time.perf_counter()``) a target's length after its first statement
    (time spent queued behind other writes holds no lock of ours); the pacer learns what
    it did (``done_of`` its result) and how long it held the lock. Returns the result and
    that lock time."""
    budget = pacer.units(kind)
    started = [0.0]
    committed = [0.0]
    stamped = threading.Event()

    def stamp() -> None:
        committed[0] = time.perf_counter()
        stamped.set()

    def step(ctx: WriteContext) -> T:
        started[0] = time.perf_counter()
        # The lock time is measured on the writer thread, from the first statement to the
        # end of the commit (after-commit hooks run right after it), not when this thread
        # gets to run again: on a busy machine that can be much later.
        ctx.after_commit(stamp)
        return fn(ctx, budget, started[0] + pacer.pace.target_s)

    result = store.write(step)
    stamped.wait(1.0)  # the hooks run just after the callers are told
    lock_s = (committed[0] or time.perf_counter()) - started[0]
    pacer.record(kind, done_of(result), lock_s)
    return result, lock_s
