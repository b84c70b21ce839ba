"""The store on PostgreSQL beside SQLite, and 1, 2 and 3 control-plane nodes on one database.

What is measured (all on this machine, side by side in one run, rounds interleaved):

(a) *Durable commands/s*: 16 submitter threads, each on its own session, loop ``enqueue ->
    claim_next -> complete`` (three durable writes, each acknowledged after its commit)
    through ``Store``: a SQLite file (WAL, ``synchronous=FULL``) against a PostgreSQL
    database (``fsync=on``, ``synchronous_commit=on``: a commit is on disk before it is
    acknowledged, like SQLite's FULL).
(b) *Turn latency*: one ``ControlPlane`` and one session of the no-op agent; sequential
    prompts, each timed from ``prompt()`` to its outcome; SQLite against PostgreSQL. Also
    counted per turn: the node writer's transactions, and on PostgreSQL every transaction
    and row of the database (``pg_stat_database``) over the same turns.
(c) *Nodes*: 1, 2 and 3 node processes (``tests.support.node_driver``) on one PostgreSQL
    database; a client spawns 24 sessions and then sends waves of one prompt per session.
    Reported: commands completed per second over the waves, and a prompt's enqueue-to-start
    (the command's ``started_at`` minus its ``created_at``: the time until some node claimed
    it), p50 and p99.

The PostgreSQL server is the tests' throwaway one (tests/support/postgres.py), started here
with ``fsync=on`` from the machine's server binaries. Run from the repository root::

    python bench/nodes.py                    # about 3 minutes
    python bench/nodes.py --rounds 3 --waves 5
    python bench/nodes.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:  # ahead of bench/ itself, whose actors.py is not the package
    sys.path.insert(0, _REPO_ROOT)

from bench._common import child_env, machine_info, median, now, progress  # noqa: E402
from protocol.example_agent import noop  # noqa: E402
from store import AgentSpec, CommandKind, Store, StoreOptions  # noqa: E402

AGENT = AgentSpec(name="bench", command=("true",))
NOOP = AgentSpec("noop-agent", noop.command())
PAYLOAD: dict[str, Any] = {"content": [{"type": "text", "text": "go"}]}
SUBMITTERS = 16


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# -- (a) durable commands/s ----------------------------------------------------------------


def commands_per_s(db: str, commands: int) -> float:
    store = Store.open(db, StoreOptions())
    try:
        work = tempfile.gettempdir()
        sessions = [
            store.spawn(AGENT, work, None, None, f"b-{uuid.uuid4().hex[:8]}").session.id
            for _ in range(SUBMITTERS)
        ]
        per = commands // SUBMITTERS
        barrier = threading.Barrier(SUBMITTERS + 1)
        errors: list[BaseException] = []

        def submit(session_id: str) -> None:
            try:
                barrier.wait()
                for _ in range(per):
                    store.enqueue(session_id, CommandKind.PROMPT, PAYLOAD)
                    claimed = store.claim_next(session_id)
                    assert claimed is not None
                    store.complete(claimed.id, {"stopReason": "end_turn"})
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=submit, args=(s,), daemon=True) for s in sessions]
        for t in threads:
            t.start()
        barrier.wait()
        start = now()
        for t in threads:
            t.join()
        elapsed = now() - start
        if errors:
            raise RuntimeError("a submitter failed") from errors[0]
        return per * SUBMITTERS / elapsed
    finally:
        store.close()


# -- (b) turn latency ----------------------------------------------------------------------


def _pg_counts(admin_url: str, db: str) -> tuple[int, int, int]:
    """(transactions committed, rows inserted, rows updated) of ``db`` so far."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit, tup_inserted, tup_updated FROM pg_stat_database "
            "WHERE datname = %s",
            (db.rsplit("/", 1)[1],),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def turn_latencies(
    db: str, turns: int, work: str, admin_url: str | None = None
) -> tuple[list[float], dict[str, float]]:
    """Each turn's time; with ``admin_url`` (PostgreSQL) also what one turn cost the
    database, counted: the writer's transactions, and all transactions and rows."""
    from control_plane import ControlPlane
    from tests.support.cp_harness import FAST

    settings = replace(FAST, log_dir=os.path.join(work, "logs"))
    counts: dict[str, float] = {}
    with ControlPlane.open(db, settings=settings) as cp:
        spawned = cp.spawn(NOOP, work, "warm up")
        assert spawned.command is not None
        cp.wait(spawned.command.id, 60)
        writes_before = cp._store.commit_stats[0]
        pg_before = _pg_counts(admin_url, db) if admin_url else None
        times = []
        for i in range(turns):
            start = now()
            command = cp.prompt(spawned.session.id, f"turn {i}")
            if not cp.wait(command.id, 60).ok:
                raise RuntimeError(f"turn {i} failed")
            times.append(now() - start)
        counts["write_tx_per_turn"] = (cp._store.commit_stats[0] - writes_before) / turns
        if admin_url and pg_before:
            time.sleep(0.6)  # the statistics collector reports with a short delay
            after = _pg_counts(admin_url, db)
            # Includes the sweep's reads and the lease renewals of the same seconds.
            counts["pg_tx_per_turn"] = (after[0] - pg_before[0]) / turns
            counts["rows_inserted_per_turn"] = (after[1] - pg_before[1]) / turns
            counts["rows_updated_per_turn"] = (after[2] - pg_before[2]) / turns
        return times, counts


# -- (c) nodes -----------------------------------------------------------------------------


def run_nodes(db: str, count: int, sessions: int, waves: int, work: str) -> dict[str, float]:
    from control_plane import ControlPlane
    from tests.support.cp_harness import FAST

    env = child_env(work)
    procs = []
    try:
        for i in range(count):
            argv = [db, work, f"n{i}", "-", "15", "0.5"]
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.node_driver", *argv],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
                cwd=_REPO_ROOT,
            )
            assert proc.stdout is not None
            if not proc.stdout.readline().startswith("ready"):
                raise RuntimeError("a node did not start")
            procs.append(proc)
        settings = replace(FAST, log_dir=os.path.join(work, "logs-client"))
        with ControlPlane.open(db, settings=settings, run_sessions=False) as cp:
            tag = uuid.uuid4().hex[:6]
            spawned = [
                cp.spawn(NOOP, work, "hello", idempotency_key=f"{tag}{i}") for i in range(sessions)
            ]
            for s in spawned:
                assert s.command is not None
                cp.wait(s.command.id, 120)
            # Latency: waves of one prompt per session, each wave after the last finished,
            # so every prompt finds its session idle and waits only for a node to claim it.
            ids: list[str] = []
            for wave in range(waves):
                batch = [cp.prompt(s.session.id, f"wave {wave}").id for s in spawned]
                for command_id in batch:
                    if not cp.wait(command_id, 120).ok:
                        raise RuntimeError("a prompt failed")
                ids += batch
            delays = []
            for command_id in ids:
                record = cp.command(command_id)
                assert record.started_at is not None
                delays.append((record.started_at - record.created_at).total_seconds())
            # Throughput: every session's prompts queued at once; the fleet drains them.
            start = now()
            burst = [
                cp.prompt(s.session.id, f"burst {i}").id for i in range(waves) for s in spawned
            ]
            for command_id in burst:
                if not cp.wait(command_id, 300).ok:
                    raise RuntimeError("a prompt failed")
            elapsed = now() - start
            owners = {cp.get(s.session.id).owner for s in spawned}
        return {
            "commands_per_s": len(burst) / elapsed,
            "enqueue_to_start_p50_ms": _p(delays, 0.5) * 1000,
            "enqueue_to_start_p99_ms": _p(delays, 0.99) * 1000,
            "nodes_owning_sessions": float(len(owners)),
        }
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


# -- driver --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commands", type=int, default=1600)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--waves", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from tests.support.postgres import PostgresServer, find_server_binaries

    bin_dir = find_server_binaries()
    if bin_dir is None:
        print("PostgreSQL server binaries not found: apt-get install postgresql", file=sys.stderr)
        return 2
    report: dict[str, Any] = {"machine": machine_info()}
    with (
        tempfile.TemporaryDirectory(prefix="acpctl-bench-nodes-") as work,
        PostgresServer(bin_dir, fsync=True) as server,
    ):
        rates: dict[str, list[float]] = {"sqlite": [], "postgresql": []}
        turns: dict[str, list[float]] = {"sqlite": [], "postgresql": []}
        per_turn: dict[str, list[dict[str, float]]] = {}
        for r in range(args.rounds):
            progress(f"round {r + 1}/{args.rounds}: (a) commands/s, (b) turns")
            for backend in ("sqlite", "postgresql"):
                db = (
                    os.path.join(work, f"a-{r}.db")
                    if backend == "sqlite"
                    else server.create_database()
                )
                rates[backend].append(commands_per_s(db, args.commands))
                db = (
                    os.path.join(work, f"b-{r}.db")
                    if backend == "sqlite"
                    else server.create_database()
                )
                admin = None if backend == "sqlite" else server.admin_url()
                times, counts = turn_latencies(db, args.turns, work, admin)
                turns[backend] += times
                per_turn.setdefault(backend, []).append(counts)
        report["commands_per_s"] = {k: median(v) for k, v in rates.items()}
        report["commands_ratio_pg_to_sqlite"] = median(rates["postgresql"]) / median(
            rates["sqlite"]
        )
        report["turn_ms"] = {
            k: {"p50": median(v) * 1000, "p99": _p(v, 0.99) * 1000} for k, v in turns.items()
        }
        report["turn_ratio_pg_to_sqlite"] = median(turns["postgresql"]) / median(turns["sqlite"])
        report["per_turn"] = {
            backend: {key: median([c[key] for c in runs]) for key in runs[0]}
            for backend, runs in per_turn.items()
        }
        nodes: dict[int, list[dict[str, float]]] = {1: [], 2: [], 3: []}
        for r in range(args.rounds):
            for count in nodes:
                progress(f"round {r + 1}/{args.rounds}: (c) {count} node(s)")
                db = server.create_database()
                nodes[count].append(run_nodes(db, count, args.sessions, args.waves, work))
        report["nodes"] = {
            count: {key: median([run[key] for run in runs]) for key in runs[0]}
            for count, runs in nodes.items()
        }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"\n(a) durable commands/s, {SUBMITTERS} submitters (median of {args.rounds} rounds)")
    for k, v in report["commands_per_s"].items():
        print(f"    {k:<11} {v:8.0f}")
    print(f"    PostgreSQL / SQLite: {report['commands_ratio_pg_to_sqlite']:.2f}x")
    print(f"(b) turn latency, no-op agent, {args.turns} turns x {args.rounds} rounds")
    for k, v in report["turn_ms"].items():
        print(f"    {k:<11} p50 {v['p50']:6.1f} ms   p99 {v['p99']:6.1f} ms")
    print(f"    PostgreSQL / SQLite (p50): {report['turn_ratio_pg_to_sqlite']:.2f}x")
    for backend, counts in report["per_turn"].items():
        shown = ", ".join(f"{k.replace('_per_turn', '')} {v:.1f}" for k, v in counts.items())
        print(f"    per turn on {backend}: {shown}")
    print(f"(c) nodes on one PostgreSQL: {args.sessions} sessions, {args.waves} waves")
    for count, v in report["nodes"].items():
        print(
            f"    {count} node(s): {v['commands_per_s']:6.1f} commands/s   enqueue->start "
            f"p50 {v['enqueue_to_start_p50_ms']:6.1f} ms  p99 {v['enqueue_to_start_p99_ms']:6.1f}"
            f" ms   ({v['nodes_owning_sessions']:.0f} nodes own sessions)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
