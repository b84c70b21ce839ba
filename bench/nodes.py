"""The store on PostgreSQL beside SQLite, and 1, 2 and 3 control-plane nodes on one database.

What is measured (all on this machine, side by side in one run, rounds interleaved):

(a) *Durable commands/s*: 16 submitter threads, each on its own session, loop ``enqueue ->
    claim_next -> complete`` (three durable writes, each acknowledged after its commit)
    through ``Store``: a SQLite file (WAL, ``synchronous=FULL``) against a PostgreSQL
    database (``fsync=on``, ``synchronous_commit=on``: a commit is on disk before it is
    acknowledged, like SQLite's FULL), PostgreSQL twice: with the writer batching the
    statements it does not read (store/raw.py ``later``, the default) and without
    (``BATCH`` off: each statement its own round trip).
(b) *Turn latency*: one ``ControlPlane`` and one session of the no-op agent; sequential
    prompts, each timed from ``prompt()`` to its outcome; the same three stores. Also
    counted per turn: the node writer's transactions, and on PostgreSQL (on turns of their
    own, not timed) the writer connection's statements and round trips, from libpq's
    protocol trace (bench/pg_trace.py).
(c) *Nodes*: 1, 2 and 3 node processes on one PostgreSQL database, each node with sessions
    of its own: notifications delivered per enqueue and per streaming commit, a prompt's
    enqueue-to-start, commands/s in a burst and the CPU it took (bench/nodes_fleet.py).
    Each fleet's database starts with ``--history`` finished sessions (default 20,000; 0 for
    an empty store), as a fleet's store would: see ``history_template``.

The PostgreSQL server is the tests' throwaway one (tests/support/postgres.py), started here
with ``fsync=on`` from the machine's server binaries. Run from the repository root::

    python bench/nodes.py                    # about 6 minutes
    python bench/nodes.py --rounds 2 --waves 3
    python bench/nodes.py --json
"""

from __future__ import annotations

import argparse
import json
import os
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

from bench._common import machine_info, median, now, progress  # noqa: E402
from bench.nodes_fleet import run_fleet, server_cpu_s  # noqa: E402
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


def commands_per_s(db: str, commands: int, postmaster: int | None) -> tuple[float, float, float]:
    """Commands/s, and the CPU milliseconds per command of this process (SQLite's work is
    all here) and of the PostgreSQL server's processes."""
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
        server0 = server_cpu_s(postmaster)
        start, cpu0 = now(), time.process_time()
        for t in threads:
            t.join()
        elapsed, cpu = now() - start, time.process_time() - cpu0
        server = server_cpu_s(postmaster) - server0
        if errors:
            raise RuntimeError("a submitter failed") from errors[0]
        done = per * SUBMITTERS
        return done / elapsed, cpu * 1000 / done, server * 1000 / done
    finally:
        store.close()


# -- (b) turn latency ----------------------------------------------------------------------


def turn_latencies(
    db: str, turns: int, work: str, traced: int = 0
) -> tuple[list[float], dict[str, float]]:
    """Each turn's time, and what a turn cost: the writer's transactions; with ``traced``
    (PostgreSQL) that many more turns, untimed, under libpq's trace: statements and round
    trips of the write connection per turn."""
    from bench.pg_trace import count, traced_writer
    from control_plane import ControlPlane
    from tests.support.cp_harness import FAST

    settings = replace(FAST, log_dir=os.path.join(work, "logs"))
    counts: dict[str, float] = {}
    with ControlPlane.open(db, settings=settings) as cp:
        spawned = cp.spawn(NOOP, work, "warm up")
        assert spawned.command is not None
        cp.wait(spawned.command.id, 60)
        sid = spawned.session.id

        def turn(i: int) -> None:
            if not cp.wait(cp.prompt(sid, f"turn {i}").id, 60).ok:
                raise RuntimeError(f"turn {i} failed")

        writes_before = cp._store.commit_stats[0]
        times = []
        for i in range(turns):
            start = now()
            turn(i)
            times.append(now() - start)
        counts["write_tx_per_turn"] = (cp._store.commit_stats[0] - writes_before) / turns
        if traced:
            path = os.path.join(work, f"trace-{uuid.uuid4().hex[:6]}.txt")
            with traced_writer(cp._store, path):
                for i in range(traced):
                    turn(i)
            trace = count(path)
            counts["statements_per_turn"] = trace.statements / traced
            counts["round_trips_per_turn"] = trace.round_trips / traced
        return times, counts


# -- driver --------------------------------------------------------------------------------


def fleet_summary(nodes: dict[int, dict[str, float]]) -> dict[str, float]:
    """The fleet's headline ratios, and what this machine allows: the most commands/s its
    cores, less what others used of them meanwhile, give at the CPU each command cost (all
    of it: nodes with their agents, PostgreSQL, the client) with three nodes."""
    one, three = nodes[1], nodes[3]
    cpu_ms = sum(three[f"cpu_ms_per_command_{k}"] for k in ("nodes", "postgres", "client"))
    free_cores = three["machine_cores"] - three["others_cpu_cores"]
    ceiling = free_cores * 1000 / cpu_ms
    return {
        "three_vs_one_node_cmd_per_s": three["commands_per_s"] / one["commands_per_s"],
        "notifications_per_enqueue_3_nodes": three["notifications_per_enqueue"],
        "cpu_ceiling_3_nodes_cmd_per_s": ceiling,
        "three_vs_one_node_cpu_ceiling": ceiling / one["commands_per_s"],
    }


def print_report(report: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"\n(a) durable commands/s, {SUBMITTERS} submitters (median of {args.rounds} rounds)")
    for k, v in report["commands_per_s"].items():
        used = report["commands_cpu_ms"][k]
        print(
            f"    {k:<23} {v:8.0f}   CPU ms per command: this process {used['client']:.2f},"
            f" postgres {used['postgres']:.2f}"
        )
    print(
        f"    PostgreSQL / SQLite: {report['pg_vs_sqlite_cmd_per_s']:.2f}x (their CPU per "
        f"command allows {report['pg_vs_sqlite_cpu_allows']:.2f}x)"
    )
    print(f"    batched / one by one: {report['batched_vs_one_by_one_cmd_per_s']:.2f}x")
    print(f"(b) turn latency, no-op agent, {args.turns} turns x {args.rounds} rounds")
    for k, v in report["turn_ms"].items():
        print(f"    {k:<23} p50 {v['p50']:6.1f} ms   p99 {v['p99']:6.1f} ms")
    print(f"    PostgreSQL / SQLite (p50): {report['pg_vs_sqlite_turn_p50']:.2f}x")
    print(f"    batched / one by one (p50): {report['batched_vs_one_by_one_turn_p50']:.2f}x")
    for backend, counts in report["per_turn"].items():
        shown = ", ".join(f"{k.replace('_per_turn', '')} {v:.1f}" for k, v in counts.items())
        print(f"    per turn on {backend}: {shown}")
    if not report["nodes"]:
        return
    print(f"(c) nodes on one PostgreSQL: {args.per_node} sessions per node, {args.waves} waves")
    for count, v in report["nodes"].items():
        print(
            f"    {count} node(s): {v['commands_per_s']:6.1f} commands/s   enqueue->start "
            f"p50 {v['enqueue_to_start_p50_ms']:6.1f} ms  p99 {v['enqueue_to_start_p99_ms']:6.1f}"
            f" ms   ({v['nodes_owning_sessions']:.0f} nodes own sessions)"
        )
        print(
            f"        notifications: {v['notifications_per_enqueue']:.2f} per enqueue, "
            f"{v['notifications_per_streaming_commit']:.2f} per streaming commit, "
            f"{v['notifications_per_turn']:.2f} per turn"
        )
        print(
            f"        CPU ms per command: nodes+agents {v['cpu_ms_per_command_nodes']:.1f}, "
            f"postgres {v['cpu_ms_per_command_postgres']:.1f}, client "
            f"{v['cpu_ms_per_command_client']:.1f}; machine busy "
            f"{v['machine_busy_share'] * 100:.0f}% (others {v['others_cpu_cores']:.2f} cores)"
        )
        print(
            f"        serialization failures (groups run again): "
            f"{v['serialization_failures_per_command']:.2f} per command"
        )
    print(
        f"    3 nodes / 1 node: {report['three_vs_one_node_cmd_per_s']:.2f}x "
        f"(this machine's CPU allows {report['three_vs_one_node_cpu_ceiling']:.2f}x: "
        f"{report['cpu_ceiling_3_nodes_cmd_per_s']:.0f} commands/s)"
    )


BACKENDS = ("sqlite", "postgresql", "postgresql-one-by-one")


def _set_batching(backend: str) -> None:
    import store.raw

    store.raw.BATCH = backend != "postgresql-one-by-one"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commands", type=int, default=1600)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--traced-turns", type=int, default=10)
    parser.add_argument("--per-node", type=int, default=8, help="sessions pinned to each node")
    parser.add_argument("--waves", type=int, default=6)
    parser.add_argument("--no-fleet", action="store_true", help="parts (a) and (b) only")
    parser.add_argument(
        "--history",
        type=int,
        default=20000,
        help="finished sessions each fleet's database holds before part (c) (0: empty)",
    )
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
        assert server._proc is not None
        postmaster = server._proc.pid
        rates: dict[str, list[float]] = {b: [] for b in BACKENDS}
        cpu: dict[str, list[tuple[float, float]]] = {b: [] for b in BACKENDS}
        turns: dict[str, list[float]] = {b: [] for b in BACKENDS}
        per_turn: dict[str, list[dict[str, float]]] = {b: [] for b in BACKENDS}
        for r in range(args.rounds):
            progress(f"round {r + 1}/{args.rounds}: (a) commands/s, (b) turns")
            order = BACKENDS if r % 2 == 0 else BACKENDS[::-1]
            for backend in order:
                _set_batching(backend)
                sqlite = backend == "sqlite"
                db = os.path.join(work, f"a-{r}.db") if sqlite else server.create_database()
                rate, client_ms, server_ms = commands_per_s(db, args.commands, postmaster)
                rates[backend].append(rate)
                cpu[backend].append((client_ms, server_ms))
                db = os.path.join(work, f"b-{r}.db") if sqlite else server.create_database()
                traced = 0 if sqlite or r > 0 else args.traced_turns
                times, counts = turn_latencies(db, args.turns, work, traced)
                turns[backend] += times
                per_turn[backend].append(counts)
        _set_batching("postgresql")
        report["commands_per_s"] = {k: median(v) for k, v in rates.items()}
        report["commands_cpu_ms"] = {
            k: {"client": median([c[0] for c in v]), "postgres": median([c[1] for c in v])}
            for k, v in cpu.items()
        }
        report["turn_ms"] = {
            k: {"p50": median(v) * 1000, "p99": _p(v, 0.99) * 1000} for k, v in turns.items()
        }
        report["per_turn"] = {
            backend: {key: median([c[key] for c in runs if key in c]) for key in runs[0]}
            for backend, runs in per_turn.items()
        }
        report["pg_vs_sqlite_cmd_per_s"] = median(rates["postgresql"]) / median(rates["sqlite"])
        # What the CPU allows where it is the limit (this machine): commands/s in inverse
        # proportion to the CPU one command takes, this process's and the server's.
        spent = {k: v["client"] + v["postgres"] for k, v in report["commands_cpu_ms"].items()}
        report["pg_vs_sqlite_cpu_allows"] = spent["sqlite"] / spent["postgresql"]
        report["pg_vs_sqlite_turn_p50"] = median(turns["postgresql"]) / median(turns["sqlite"])
        report["batched_vs_one_by_one_cmd_per_s"] = median(rates["postgresql"]) / median(
            rates["postgresql-one-by-one"]
        )
        report["batched_vs_one_by_one_turn_p50"] = median(turns["postgresql"]) / median(
            turns["postgresql-one-by-one"]
        )
        fleets: dict[int, list[dict[str, float]]] = {1: [], 2: [], 3: []}
        if args.no_fleet:
            fleets = {}
        log = str(server.tmp / "log") if server.tmp is not None else None
        template = history_template(server, args.history) if fleets and args.history else None
        report["fleet_history_sessions"] = args.history if template else 0
        for r in range(args.rounds):
            for count in fleets if r % 2 == 0 else reversed(fleets):
                progress(f"round {r + 1}/{args.rounds}: (c) {count} node(s)")
                db = server.create_database(template=template)
                fleets[count].append(
                    run_fleet(db, count, args.per_node, args.waves, work, postmaster, log)
                )
        report["nodes"] = {
            count: {key: median([run[key] for run in runs]) for key in runs[0]}
            for count, runs in fleets.items()
        }
        if fleets:
            report.update(fleet_summary(report["nodes"]))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print_report(report, args)
    return 0


def history_template(server: Any, sessions: int) -> str:
    """A database holding ``sessions`` finished sessions (store/synthetic.py: their commands,
    events and search documents), analyzed, copied for each fleet. A fleet's store has a
    history: on an empty one every node's rows share the same few index pages, and
    serializable isolation's page locks turn that into conflicts no real store has
    (docs/scaling.md, "Serialization failures")."""
    import random

    from store import Store
    from store.synthetic import Vocabulary, analyze, seed

    progress(f"(c) a store with {sessions} finished sessions, the fleets' template")
    name = f"history_{uuid.uuid4().hex[:12]}"
    url = server.create_database(name)
    rng = random.Random(7)
    with Store.open(url) as store:
        seed(store, sessions, 8, Vocabulary.make(2000, rng), rng)
        analyze(store)
    return name


if __name__ == "__main__":
    sys.exit(main())
