"""The floor of the store's design: what the least Python a single-writer group commit can
run per command reaches, next to the store and the raw baseline.

Why this exists
---------------
``bench/store_throughput.py`` measures the store against the issue's target (64 submitters
at least 3x a raw one-commit-per-command baseline). The store stays below 1x on a disk that
fsyncs in ~0.3 ms because it is CPU-bound under the GIL, not disk-bound. This script asks
how much of that is the store's own overhead and how much the design itself: it runs the
*same SQL* (the store's fixed hot-path statements from ``store/hot_sql.py``, on a database
created by ``Store.open``, so the same tables, indexes, WAL and ``synchronous=FULL``) through
the barest possible group commit: one writer thread on a raw ``sqlite3`` connection, callers
handing it closures on a ``queue.SimpleQueue`` and waiting on a ``threading.Lock`` released
after the ``COMMIT`` that holds their write. No records are built, no request hash is
computed (a constant), nobody is notified after a commit. One command is the same three
acknowledged writes as the store's (enqueue with its idempotency-key look-up, claim, complete).

If the floor is itself far below the target, no amount of tuning of the store reaches it;
only a different design would (a writer outside the interpreter's lock, or fewer
acknowledged writes per command).

Run from the repository root::

    python bench/store_floor.py               # 3 rounds, 64 submitters: ~30 s
    python bench/store_floor.py --rounds 5 --submitters 16,64
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:  # ahead of bench/ itself, whose actors.py is not the package
    sys.path.insert(0, _REPO_ROOT)

from bench._common import (  # noqa: E402
    machine_info,
    median,
    positive_int,
    positive_int_list,
    progress,
)
from bench.store_throughput import (  # noqa: E402
    AGENT,
    PAYLOAD,
    TARGET_RATIO,
    Run,
    _remove_db,
    run_baseline,
    run_control_plane,
    split,
    timed_submitters,
)
from store import Store, StoreOptions, Synchronous  # noqa: E402
from store import hot_sql as hot  # noqa: E402

COMPLETE_SQL = hot.transition_sql(("result", "finished_at"), 1)
PAYLOAD_TEXT = json.dumps(PAYLOAD)
Write = Callable[[sqlite3.Connection], Any]


class _Ack:
    __slots__ = ("fn", "lock", "value")

    def __init__(self, fn: Write) -> None:
        self.fn = fn
        self.lock = threading.Lock()
        self.lock.acquire()
        self.value: Any = None


class MinimalGroupCommit:
    """One writer thread; every write waiting goes into one transaction; acknowledged after
    its COMMIT. No error handling beyond stopping: this is a measuring device."""

    def __init__(self, path: str) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._queue: queue.SimpleQueue[_Ack | None] = queue.SimpleQueue()
        self.transactions = 0
        self.writes = 0
        self._thread = threading.Thread(target=self._run, name="floor-writer", daemon=True)
        self._thread.start()

    def call(self, fn: Write) -> Any:
        ack = _Ack(fn)
        self._queue.put(ack)
        ack.lock.acquire()
        return ack.value

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self._conn.close()

    def _run(self) -> None:
        conn = self._conn
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            conn.execute("BEGIN IMMEDIATE")
            for ack in batch:
                ack.value = ack.fn(conn)
            conn.execute("COMMIT")
            self.transactions += 1
            self.writes += len(batch)
            for ack in batch:
                ack.lock.release()
            if stop:
                return


def _enqueue(session_id: str, key: str) -> Write:
    def write(conn: sqlite3.Connection) -> str:
        if conn.execute(hot.COMMAND_BY_KEY, (session_id, key)).fetchone() is not None:
            raise RuntimeError(f"key {key} reused")
        (seq,) = conn.execute(hot.NEXT_COMMAND_SEQ, (session_id,)).fetchone()
        command_id, at = str(uuid.uuid4()), time.time()
        row = hot.queued_command_row(
            command_id, session_id, seq, "prompt", PAYLOAD_TEXT, key, "0" * 64, 0, 3, at
        )
        conn.execute(hot.INSERT_COMMAND, row)
        return command_id

    return write


def _submitter(
    writer: MinimalGroupCommit,
    session_id: str,
    count: int,
    tag: str,
    barrier: threading.Barrier,
    errors: list[BaseException],
) -> None:
    try:
        barrier.wait()
        for i in range(count):
            command_id = writer.call(_enqueue(session_id, f"{tag}-{i}"))
            at = time.time()

            def claim(c: sqlite3.Connection, at: float = at) -> Any:
                return c.execute(hot.CLAIM_NEXT, (at, at, session_id)).fetchone()

            claimed = writer.call(claim)
            if claimed is None or claimed[0] != command_id:
                raise RuntimeError(f"claimed {claimed!r}, expected {command_id}")

            def complete(c: sqlite3.Connection, cid: str = command_id, at: float = at) -> Any:
                return c.execute(
                    COMPLETE_SQL, ("completed", at, '{"stopReason":"end_turn"}', at, cid, "running")
                ).fetchone()

            done = writer.call(complete)
            if done is None:
                raise RuntimeError(f"complete refused for {command_id}")
    except BaseException as exc:  # reported by the main thread
        errors.append(exc)
        barrier.abort()


def run_floor(workdir: str, submitters: int, commands: int) -> Run:
    path = os.path.join(workdir, f"floor-{submitters}-{uuid.uuid4().hex[:8]}.db")
    store = Store.open(path, StoreOptions(synchronous=Synchronous.FULL))
    sessions = [
        store.spawn(AGENT, workdir, None, None, f"floor-session-{i}").session.id
        for i in range(submitters)
    ]
    store.close()  # the schema and sessions stay; the floor writes with its own connection
    writer = MinimalGroupCommit(path)
    try:
        jobs = list(zip(sessions, split(commands, submitters), strict=True))
        return timed_submitters(
            writer, _submitter, jobs, "f", lambda: (writer.transactions, writer.writes)
        )
    finally:
        writer.close()
        _remove_db(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--commands", type=positive_int, default=1920, help="per run")
    parser.add_argument("--submitters", type=positive_int_list, default=[64])
    parser.add_argument("--dir", default=None, help="parent of the temporary directory")
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="acp-store-floor-", dir=args.dir)
    kinds = ("baseline", "floor", "store")
    rates: dict[tuple[str, int], list[float]] = {}
    cpu: dict[tuple[str, int], list[float]] = {}  # CPU µs per command (floor, store)
    try:
        for r in range(args.rounds):
            parts = []
            for n in args.submitters:
                order = kinds[r % 3 :] + kinds[: r % 3]
                for kind in order:
                    if kind == "baseline":
                        run = run_baseline(workdir, args.commands // 3)
                    elif kind == "floor":
                        run = run_floor(workdir, n, args.commands)
                    else:
                        run = run_control_plane(workdir, n, args.commands)
                    rates.setdefault((kind, n), []).append(run.rate)
                    cpu.setdefault((kind, n), []).append(run.cpu_us_per_command)
                    parts.append(f"{kind} x{n} {run.rate:,.0f}/s")
            progress(f"round {r + 1}/{args.rounds}: " + ", ".join(parts))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    mach = machine_info()
    print(
        f"store floor: 3 acknowledged writes per command (enqueue, claim, complete), "
        f"synchronous=FULL, {args.rounds} rounds, medians\n"
        f"Python {mach['python']}, SQLite {mach['sqlite']}, {mach['cpus']} CPUs"
    )
    print(
        f"{'submitters':>10}{'baseline':>11}{'floor':>9}{'store':>9}{'floor/base':>12}"
        f"{'store/base':>12}{'store/floor':>13}"
    )
    for n in args.submitters:
        base = median(rates[("baseline", n)])
        floor = median(rates[("floor", n)])
        store = median(rates[("store", n)])
        print(
            f"{n:>10}{base:>11,.0f}{floor:>9,.0f}{store:>9,.0f}{floor / base:>11.2f}x"
            f"{store / base:>11.2f}x{store / floor:>12.2f}x"
        )
    # The CPU the process spends per command moves far less with the disk's and the
    # machine's noise than the rate does: the steadier read of "store / floor".
    print(f"{'submitters':>10}{'floor CPU':>12}{'store CPU':>12}{'floor/store CPU':>17}")
    for n in args.submitters:
        floor_cpu, store_cpu = median(cpu[("floor", n)]), median(cpu[("store", n)])
        print(f"{n:>10}{floor_cpu:>9.0f} µs{store_cpu:>9.0f} µs{floor_cpu / store_cpu:>16.2f}x")
    print(
        f"floor = the store's own statements through the least Python a single-writer group "
        f"commit needs; the issue's target is {TARGET_RATIO:.1f}x the baseline"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
