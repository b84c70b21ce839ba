"""Where a turn's store time goes, statement by statement, on the writer's connection.

Why this exists
---------------
``bench/store_throughput.py`` finds a turn's two writes (the prompt queued and claimed in one
transaction, then its outcome) far slower per turn than the raw baseline's one insert. This
script asks how much of a turn's writer time is SQLite executing the statements and how much
is the store's Python around them: it runs the same operations (``ops.submit_prompt`` +
``turns.claim_submitted``, ``turns.finish_turn``) for ``--turns`` turns of one idle session
inside a single write (no commit, fsync or thread hand-off in the figure), once with every
statement timed through a thin proxy of the driver connection and once without, and prints
the time per turn of each statement text, the sum, and the whole.

Every figure is this thread's CPU time (``time.thread_time``), so a busy machine that
preempts the thread does not count its waits. The proxy's own cost (a Python call around
each ``execute``) is inside the statement figures; the untimed pass gives the whole without
it.

Run from the repository root::

    python bench/turn_statements.py                 # 5 rounds of 300 turns: ~10 s
    python bench/turn_statements.py --rounds 9 --turns 500
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from typing import Any

Spent = defaultdict[str, float]  # seconds per statement text

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:  # ahead of bench/ itself, whose actors.py is not the package
    sys.path.insert(0, _REPO_ROOT)

from bench._common import machine_info, median, positive_int  # noqa: E402
from bench.store_throughput import PAYLOAD, RESULT, idle_session  # noqa: E402
from state_machines import CommandState  # noqa: E402
from store import Store, StoreOptions, Synchronous, ops  # noqa: E402
from store.ops import turns  # noqa: E402
from store.writer import WriteContext  # noqa: E402


class _TimedCursor:
    def __init__(self, cursor: Any, sql: str, spent: Spent) -> None:
        self._cursor, self._sql, self._spent = cursor, sql, spent

    def fetchone(self) -> Any:
        began = time.thread_time()
        row = self._cursor.fetchone()
        self._spent[self._sql] += time.thread_time() - began
        return row

    def fetchall(self) -> Any:
        began = time.thread_time()
        rows = self._cursor.fetchall()
        self._spent[self._sql] += time.thread_time() - began
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


class _TimedRaw:
    """The driver connection with each statement's execution and fetches timed by its text
    (a ``RETURNING`` statement runs partly in its fetch)."""

    def __init__(self, raw: Any, spent: Spent, calls: Counter[str]) -> None:
        self._raw, self._spent, self._calls = raw, spent, calls

    def execute(self, sql: str, *args: Any) -> _TimedCursor:
        began = time.thread_time()
        cursor = self._raw.execute(sql, *args)
        self._spent[sql] += time.thread_time() - began
        self._calls[sql] += 1
        return _TimedCursor(cursor, sql, self._spent)

    def executemany(self, sql: str, rows: Any) -> Any:
        began = time.thread_time()
        cursor = self._raw.executemany(sql, rows)
        self._spent[sql] += time.thread_time() - began
        self._calls[sql] += 1
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def _turns(ctx: WriteContext, session: tuple[str, int], count: int, tag: str) -> float:
    """``count`` turns' operations in this one write; seconds of this thread's CPU."""
    sid, epoch = session
    began = time.thread_time()
    for i in range(count):
        command, _ = ops.submit_prompt(ctx, sid, PAYLOAD, f"{tag}-{i}", None)
        claimed = turns.claim_submitted(ctx, sid, command.id, epoch, False)
        ids = tuple(c.id for c in claimed)
        turns.finish_turn(ctx, sid, epoch, ids, RESULT, CommandState.COMPLETED, None)
    return time.thread_time() - began


def measure(workdir: str, rounds: int, count: int) -> dict[str, Any]:
    path = os.path.join(workdir, "turns.db")
    store = Store.open(path, StoreOptions(synchronous=Synchronous.FULL))
    plain: list[float] = []
    timed: list[float] = []
    per_round: list[Spent] = []
    calls: Counter[str] = Counter()
    try:
        session = idle_session(store, workdir, "statements")
        for r in range(rounds):

            def run_plain(ctx: WriteContext, r: int = r) -> float:
                return _turns(ctx, session, count, f"p{r}")

            plain.append(store.write(run_plain))
            spent: Spent = defaultdict(float)

            def run_timed(ctx: WriteContext, r: int = r, spent: Spent = spent) -> float:
                timed_raw: Any = _TimedRaw(ctx.raw, spent, calls)
                ctx.raw = timed_raw
                return _turns(ctx, session, count, f"t{r}")

            timed.append(store.write(run_timed))
            per_round.append(spent)
    finally:
        store.close()
    statements = sorted(
        {sql for spent in per_round for sql in spent},
        key=lambda sql: -median([spent[sql] for spent in per_round]),
    )
    return {
        "turns_per_round": count,
        "rounds": rounds,
        "plain_us_per_turn": median([s / count * 1e6 for s in plain]),
        "timed_us_per_turn": median([s / count * 1e6 for s in timed]),
        "sql_us_per_turn": median([sum(spent.values()) / count * 1e6 for spent in per_round]),
        "statements": [
            {
                "sql": " ".join(sql.split()),
                "per_turn": calls[sql] / (count * rounds),
                "us_per_turn": median([spent[sql] / count * 1e6 for spent in per_round]),
            }
            for sql in statements
        ],
    }


def print_report(report: dict[str, Any]) -> None:
    mach = machine_info()
    print(
        f"a turn's store operations in one write, {report['rounds']} rounds x "
        f"{report['turns_per_round']} turns; medians per turn\n"
        f"Python {mach['python']}, SQLite {mach['sqlite']}, {mach['cpus']} CPUs"
    )
    print(f"{'µs/turn':>8} {'per turn':>8}  statement")
    for entry in report["statements"]:
        print(f"{entry['us_per_turn']:>8.1f} {entry['per_turn']:>8.1f}  {entry['sql'][:110]}")
    sql, whole, plain = (
        report["sql_us_per_turn"],
        report["timed_us_per_turn"],
        report["plain_us_per_turn"],
    )
    print(
        f"untimed: {plain:.0f} µs of CPU per turn; timed: {whole:.0f} µs, of which the "
        f"statements {sql:.0f} µs. So about {sql / plain:.0%} of a turn's writer time is "
        f"SQLite and {plain - sql:.0f} µs the store's Python around it (the proxy's own "
        f"cost, {whole - plain:.0f} µs, is in the timed figures)."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=positive_int, default=5, help="repetitions (default 5)")
    parser.add_argument(
        "--turns", type=positive_int, default=300, help="turns per round (default 300)"
    )
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="acp-turn-statements-")
    try:
        report = measure(workdir, args.rounds, args.turns)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
