"""Durable command throughput of the store, against a naive raw-``sqlite3`` baseline.

What is measured
----------------
*Control plane*: commands/s through the store's public write API with ``synchronous=FULL``.
One command's full life is three durable writes, each acknowledged only after the
transaction holding it committed: ``enqueue`` -> ``claim_next`` -> ``complete``. It is run
with 1, 16 and 64 concurrent submitter threads; each submitter has its own session (spawned
before the clock starts) and loops enqueue -> claim_next -> complete on it. The group-commit
writer folds concurrent writes into one transaction (one fsync); the figure "writes/tx" is
writes acknowledged divided by transactions committed (``Store.commit_stats``) during the
timed part.

*A turn's life* (``--turn-life``, on by default; at the highest submitter count): what the
control plane's store does for a prompt to a live idle session, without the agent's updates.
Each submitter owns an idle session (acquired at an epoch, its agent recorded as started)
and loops over two acknowledged writes: the prompt queued and claimed in one transaction
(``ops.submit_prompt`` + ``turns.claim_submitted``, a claim offer's write: the session to
``running``, the ``prompt`` event), then the turn's outcome (``turns.finish_turn``: the
``turn_ended`` event, the command completed, the session back to ``idle``). Reported as turns/s
beside the baseline: it is the same target's question asked of the path a turn takes.

*Baseline*: what a naive implementation does. A fresh SQLite file in the same temporary
directory (so on the same file system), WAL + ``synchronous=FULL``, one thread, and per
command one ``BEGIN; INSERT INTO commands ...; COMMIT`` (one fsync per command), with
``sqlite3`` directly (no SQLAlchemy). It runs at least ``--commands`` commands and at least
0.5 s, so its short run is not all noise.

The machine may be shared and noisy, so each measurement is repeated ``--rounds`` times and
the rounds interleave the baseline with the control-plane runs (all see the same noise); the
report gives medians, min/max and the *ratio of medians* (control-plane commands/s divided by
baseline commands/s). Every run gets a fresh database file; all files live in a temporary
directory (under ``--dir``, default the system temp dir, normally /tmp) that is deleted at the
end. The issue's target: group commit at 64 submitters at least 1x the raw baseline (each
command being three acknowledged writes to the baseline's one), and at least 30x DBOS
Transact doing the same work (``bench/dbos_side.py``; the optional ``bench`` extra).

Run from the repository root::

    python bench/store_throughput.py                 # defaults: ~1-2 minutes
    python bench/store_throughput.py --rounds 3 --commands 256
    python bench/store_throughput.py --json > throughput.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:  # ahead of bench/ itself, whose actors.py is not the package
    sys.path.insert(0, _REPO_ROOT)

from bench import dbos_side  # noqa: E402
from bench._common import (  # noqa: E402
    machine_info,
    median,
    now,
    peak_rss_mb,
    positive_int,
    positive_int_list,
    progress,
    spread,
)
from state_machines import CommandState  # noqa: E402
from store import (  # noqa: E402
    AgentSpec,
    CommandKind,
    CommandRecord,
    Store,
    StoreOptions,
    Synchronous,
    ops,
)
from store.ops import turns  # noqa: E402
from store.ownership import this_owner  # noqa: E402
from store.writer import WriteContext  # noqa: E402

DEFAULT_SUBMITTERS = (1, 16, 64)
DEFAULT_ROUNDS = 5
DEFAULT_COMMANDS = 640  # per run; divisible by 1, 16 and 64
TARGET_SUBMITTERS = 64
# The data-path issue's target: 64 submitters at least as fast as the naive baseline on this
# disk (a command here is three acknowledged writes, the baseline's one), and >= 30x DBOS.
TARGET_RATIO = 1.0
DBOS_TARGET = 30.0
BASELINE_MIN_SECONDS = 0.5

AGENT = AgentSpec(name="bench", command=("true",))
PAYLOAD: dict[str, Any] = {
    "content": [{"type": "text", "text": "Summarise the open pull requests in this repository."}]
}
RESULT: dict[str, Any] = {"stopReason": "end_turn"}

BASELINE_SCHEMA = """
CREATE TABLE commands (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at REAL NOT NULL
)
"""
BASELINE_INSERT = (
    "INSERT INTO commands (id, session_id, seq, kind, payload, state, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


@dataclass
class Run:
    """One timed run: ``commands`` commands in ``seconds``."""

    commands: int
    seconds: float
    transactions: int = 0
    writes: int = 0
    cpu_seconds: float = 0.0  # the process's CPU (every thread) in the timed part

    @property
    def rate(self) -> float:
        return self.commands / self.seconds if self.seconds > 0 else float("nan")

    @property
    def cpu_us_per_command(self) -> float:
        return self.cpu_seconds * 1e6 / self.commands if self.commands else float("nan")

    @property
    def writes_per_tx(self) -> float:
        return self.writes / self.transactions if self.transactions else float("nan")


def _remove_db(path: str) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + suffix)


# -- baseline ------------------------------------------------------------------------------


def run_baseline(workdir: str, commands: int) -> Run:
    path = os.path.join(workdir, f"baseline-{uuid.uuid4().hex[:8]}.db")
    conn = sqlite3.connect(path, isolation_level=None)  # autocommit: we issue BEGIN/COMMIT
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(BASELINE_SCHEMA)
        session_id = str(uuid.uuid4())
        kind = CommandKind.PROMPT.value
        done = 0
        start = now()
        elapsed = 0.0
        while done < commands or elapsed < BASELINE_MIN_SECONDS:
            done += 1
            conn.execute("BEGIN")
            conn.execute(
                BASELINE_INSERT,
                (str(uuid.uuid4()), session_id, done, kind, json.dumps(PAYLOAD), "queued", now()),
            )
            conn.execute("COMMIT")
            elapsed = now() - start
        (count,) = conn.execute("SELECT count(*) FROM commands").fetchone()
        if count != done:
            raise RuntimeError(f"baseline: {count} rows after {done} commits")
        return Run(commands=done, seconds=elapsed, transactions=done, writes=done)
    finally:
        conn.close()
        _remove_db(path)


# -- control plane -------------------------------------------------------------------------


def _submitter(
    store: Store,
    session_id: str,
    count: int,
    tag: str,
    barrier: threading.Barrier,
    errors: list[BaseException],
) -> None:
    try:
        barrier.wait()
        for i in range(count):
            queued = store.enqueue(session_id, CommandKind.PROMPT, PAYLOAD, f"{tag}-{i}").command
            claimed = store.claim_next(session_id)
            if claimed is None or claimed.id != queued.id:
                raise RuntimeError(f"claim_next returned {claimed!r}, expected {queued.id}")
            finished = store.complete(claimed.id, RESULT)
            if finished.state is not CommandState.COMPLETED:
                raise RuntimeError(f"complete left {finished.id} in {finished.state}")
    except BaseException as exc:  # reported by the main thread
        errors.append(exc)
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.abort()


def split(total: int, parts: int) -> list[int]:
    """``total`` shared out over ``parts`` as evenly as it goes."""
    share, extra = divmod(total, parts)
    return [share + (1 if i < extra else 0) for i in range(parts)]


def timed_submitters(
    through: Any,
    target: Callable[..., None],
    jobs: Sequence[tuple[Any, int]],
    label: str,
    commit_stats: Callable[[], tuple[int, int]],
) -> Run:
    """One thread per ``(subject, count)`` job running ``target(through, subject, count,
    tag, barrier, errors)`` (``through``: the store, or the floor's writer), all released at
    once by a barrier; the run from the release to the last thread's end: wall time, the
    process's CPU, and the transactions and writes ``commit_stats()`` counted meanwhile."""
    barrier = threading.Barrier(len(jobs) + 1)
    errors: list[BaseException] = []
    threads = [
        threading.Thread(
            target=target,
            args=(through, subject, count, f"{label}{i}", barrier, errors),
            name=f"bench-{label}-{i}",
            daemon=True,
        )
        for i, (subject, count) in enumerate(jobs)
    ]
    for thread in threads:
        thread.start()
    # Every submitter is parked at the barrier, so nothing is being written now.
    tx_before, writes_before = commit_stats()
    cpu_before = time.process_time()
    barrier.wait()
    start = now()
    for thread in threads:
        thread.join()
    elapsed = now() - start
    cpu = time.process_time() - cpu_before
    tx_after, writes_after = commit_stats()
    if errors:
        raise RuntimeError(f"{len(errors)} submitter(s) failed") from errors[0]
    return Run(
        commands=sum(count for _, count in jobs),
        seconds=elapsed,
        transactions=tx_after - tx_before,
        writes=writes_after - writes_before,
        cpu_seconds=cpu,
    )


def run_control_plane(workdir: str, submitters: int, commands: int) -> Run:
    path = os.path.join(workdir, f"store-{submitters}-{uuid.uuid4().hex[:8]}.db")
    store = Store.open(path, StoreOptions(synchronous=Synchronous.FULL))
    try:
        sessions = [
            store.spawn(AGENT, workdir, None, None, f"bench-session-{i}").session.id
            for i in range(submitters)
        ]
        jobs = list(zip(sessions, split(commands, submitters), strict=True))
        return timed_submitters(store, _submitter, jobs, "s", lambda: store.commit_stats)
    finally:
        store.close()
        _remove_db(path)


def idle_session(store: Store, workdir: str, tag: str) -> tuple[str, int]:
    """A session owned by this process at an epoch, its agent recorded as started (idle)."""
    sid = store.spawn(AGENT, workdir, None, None, f"bench-turns-{tag}").session.id
    epoch = store.write(lambda ctx: ops.acquire(ctx, sid, this_owner()))
    store.write(lambda ctx: turns.agent_started(ctx, sid, epoch, f"acp-{tag}", "new", {}))
    return sid, epoch


def _turn_submitter(
    store: Store,
    session: tuple[str, int],
    count: int,
    tag: str,
    barrier: threading.Barrier,
    errors: list[BaseException],
) -> None:
    sid, epoch = session
    try:
        barrier.wait()
        for i in range(count):
            key = f"{tag}-{i}"

            def queue_and_claim(ctx: WriteContext, key: str = key) -> list[CommandRecord]:
                command, _ = ops.submit_prompt(ctx, sid, PAYLOAD, key, None)
                return turns.claim_submitted(ctx, sid, command.id, epoch, False)

            claimed = store.write(queue_and_claim)
            if len(claimed) != 1:
                raise RuntimeError(f"the claim offer's write claimed {claimed!r}")
            ids = (claimed[0].id,)

            def outcome(ctx: WriteContext, ids: tuple[str, ...] = ids) -> bool:
                return turns.finish_turn(ctx, sid, epoch, ids, RESULT, CommandState.COMPLETED, None)

            store.write(outcome)
    except BaseException as exc:  # reported by the main thread
        errors.append(exc)
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.abort()


def run_turn_life(workdir: str, submitters: int, turns_total: int) -> Run:
    """``turns_total`` turns' store writes over ``submitters`` threads (see the docstring)."""
    path = os.path.join(workdir, f"turns-{submitters}-{uuid.uuid4().hex[:8]}.db")
    store = Store.open(path, StoreOptions(synchronous=Synchronous.FULL))
    try:
        sessions = [idle_session(store, workdir, str(i)) for i in range(submitters)]
        jobs = list(zip(sessions, split(turns_total, submitters), strict=True))
        return timed_submitters(store, _turn_submitter, jobs, "t", lambda: store.commit_stats)
    finally:
        store.close()
        _remove_db(path)


# -- driver --------------------------------------------------------------------------------


def measure(
    workdir: str,
    rounds: int,
    commands: int,
    submitters: list[int],
    dbos_runs: list[Run] | None,
    turn_runs: list[Run] | None = None,
) -> tuple[list[Run], dict[int, list[Run]]]:
    """Interleave: every round runs the baseline and each concurrency once (and DBOS and a
    turn's life at the highest, when ``dbos_runs`` / ``turn_runs`` is a list to fill). The
    order is rotated from round to round so no run always sits right after another."""
    baseline: list[Run] = []
    store_runs: dict[int, list[Run]] = {n: [] for n in submitters}
    labels: list[int | str | None] = [None, *submitters]  # None: the baseline
    if dbos_runs is not None:
        labels.append("dbos")
    if turn_runs is not None:
        labels.append("turns")
    for r in range(rounds):
        shift = r % len(labels)
        order = labels[shift:] + labels[:shift]
        parts: list[str] = []
        for label in order:
            if label is None:
                run = run_baseline(workdir, commands)
                baseline.append(run)
                parts.append(f"baseline {run.rate:,.0f}/s")
            elif label == "dbos":
                assert dbos_runs is not None
                done, seconds = dbos_side.run(workdir, max(submitters), commands)
                run = Run(commands=done, seconds=seconds)
                dbos_runs.append(run)
                parts.append(f"DBOS x{max(submitters)} {run.rate:,.0f}/s")
            elif label == "turns":
                assert turn_runs is not None
                run = run_turn_life(workdir, max(submitters), commands)
                turn_runs.append(run)
                parts.append(f"turns x{max(submitters)} {run.rate:,.0f}/s")
            else:
                assert isinstance(label, int)
                run = run_control_plane(workdir, label, commands)
                store_runs[label].append(run)
                parts.append(f"x{label} {run.rate:,.0f}/s ({run.writes_per_tx:.1f} w/tx)")
        progress(f"round {r + 1}/{rounds}: " + ", ".join(parts))
    return baseline, store_runs


def summarise(
    baseline: list[Run], store_runs: dict[int, list[Run]], config: dict[str, Any]
) -> dict[str, Any]:
    base_rates = [r.rate for r in baseline]
    base_median = median(base_rates)
    report: dict[str, Any] = {
        "config": config,
        "machine": machine_info(),
        "baseline": {
            "median_cmd_per_s": base_median,
            "min_max_cmd_per_s": spread(base_rates),
            "runs": [asdict(r) | {"cmd_per_s": r.rate} for r in baseline],
        },
        "control_plane": {},
    }
    for n, runs in store_runs.items():
        rates = [r.rate for r in runs]
        paired = [s.rate / b.rate for s, b in zip(runs, baseline, strict=True)]
        report["control_plane"][str(n)] = {
            "submitters": n,
            "median_cmd_per_s": median(rates),
            "min_max_cmd_per_s": spread(rates),
            "median_writes_per_tx": median([r.writes_per_tx for r in runs]),
            "ratio_of_medians": median(rates) / base_median,
            "median_paired_ratio": median(paired),
            "runs": [
                asdict(r) | {"cmd_per_s": r.rate, "writes_per_tx": r.writes_per_tx} for r in runs
            ],
        }
    target = report["control_plane"].get(str(TARGET_SUBMITTERS))
    report["target"] = {
        "submitters": TARGET_SUBMITTERS,
        "min_ratio": TARGET_RATIO,
        "ratio": None if target is None else target["ratio_of_medians"],
        "met": None if target is None else target["ratio_of_medians"] >= TARGET_RATIO,
    }
    report["peak_rss_mb"] = peak_rss_mb()
    return report


def add_dbos(report: dict[str, Any], runs: list[Run], submitters: int) -> None:
    """DBOS beside the store at the same concurrency: workflows/s and ours / DBOS."""
    rates = [r.rate for r in runs]
    ours = report["control_plane"][str(submitters)]["median_cmd_per_s"]
    report["dbos"] = {
        "version": dbos_side.version(),
        "submitters": submitters,
        "median_workflows_per_s": median(rates),
        "min_max_workflows_per_s": spread(rates),
        "ours_over_dbos": ours / median(rates),
        "target": DBOS_TARGET,
    }


def add_turn_life(
    report: dict[str, Any], runs: list[Run], baseline: list[Run], submitters: int
) -> None:
    """A turn's store life beside the baseline: turns/s and the ratio of medians."""
    rates = [r.rate for r in runs]
    base_median = median([r.rate for r in baseline])
    report["turn_life"] = {
        "submitters": submitters,
        "writes_per_turn": 2,
        "median_turns_per_s": median(rates),
        "min_max_turns_per_s": spread(rates),
        "median_writes_per_tx": median([r.writes_per_tx for r in runs]),
        "median_cpu_us_per_turn": median([r.cpu_us_per_command for r in runs]),
        "ratio_of_medians": median(rates) / base_median,
        "runs": [asdict(r) | {"turns_per_s": r.rate} for r in runs],
    }


def print_report(report: dict[str, Any]) -> None:
    cfg, mach = report["config"], report["machine"]
    print(
        f"store throughput: enqueue -> claim_next -> complete (3 durable writes per command), "
        f"synchronous=FULL\n"
        f"{cfg['rounds']} rounds x {cfg['commands']} commands per run, interleaved; "
        f"files in {cfg['dir']}\n"
        f"Python {mach['python']}, SQLite {mach['sqlite']}, "
        f"SQLAlchemy {mach.get('sqlalchemy', '?')}, {mach['cpus']} CPUs, {mach['platform']}"
    )
    print()
    header = (
        f"{'':<26}{'median cmd/s':>13}{'min':>10}{'max':>10}{'writes/tx':>11}{'vs baseline':>13}"
    )
    print(header)
    print("-" * len(header))
    base = report["baseline"]
    lo, hi = base["min_max_cmd_per_s"]
    print(
        f"{'raw sqlite3, 1 thread':<26}{base['median_cmd_per_s']:>13,.1f}{lo:>10,.1f}"
        f"{hi:>10,.1f}{1.0:>11.1f}{1.0:>12.2f}x"
    )
    for entry in report["control_plane"].values():
        lo, hi = entry["min_max_cmd_per_s"]
        label = f"control plane, {entry['submitters']} subm."
        print(
            f"{label:<26}{entry['median_cmd_per_s']:>13,.1f}{lo:>10,.1f}{hi:>10,.1f}"
            f"{entry['median_writes_per_tx']:>11.1f}{entry['ratio_of_medians']:>12.2f}x"
        )
    print()
    print(
        "vs baseline = median control-plane cmd/s / median baseline cmd/s "
        "(a control-plane command is 3 commits' worth of writes, the baseline's is 1)"
    )
    life = report.get("turn_life")
    if life is not None:
        lo, hi = life["min_max_turns_per_s"]
        print(
            f"a turn's life, {life['submitters']} subm. (2 writes: prompt queued + claimed, "
            f"outcome): {life['median_turns_per_s']:,.1f} turns/s [{lo:,.1f}..{hi:,.1f}], "
            f"{life['median_writes_per_tx']:.1f} writes/tx, "
            f"{life['median_cpu_us_per_turn']:,.0f} µs CPU per turn; "
            f"{life['ratio_of_medians']:.2f}x baseline"
        )
    target = report["target"]
    if target["ratio"] is not None:
        verdict = "MET" if target["met"] else "NOT MET"
        print(
            f"target: {target['submitters']} submitters >= {target['min_ratio']:.1f}x baseline: "
            f"{verdict} ({target['ratio']:.2f}x)"
        )
    dbos = report.get("dbos")
    if dbos is not None:
        lo, hi = dbos["min_max_workflows_per_s"]
        print(
            f"DBOS {dbos['version']}, {dbos['submitters']} submitters (workflow + step, SQLite "
            f"WAL, same file system): {dbos['median_workflows_per_s']:,.1f} workflows/s "
            f"[{lo:,.1f}..{hi:,.1f}]; the store = {dbos['ours_over_dbos']:.1f}x DBOS "
            f"(target >= {dbos['target']:.0f}x)"
        )
    else:
        print("DBOS side: not installed (pip install -e '.[bench]')")
    print(f"peak RSS: {report['peak_rss_mb']:.0f} MiB")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Durable commands/s of the store (enqueue+claim_next+complete, "
        "synchronous=FULL) against a raw sqlite3 one-commit-per-command baseline."
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=DEFAULT_ROUNDS, help="repetitions (default 5)"
    )
    parser.add_argument(
        "--commands",
        type=positive_int,
        default=DEFAULT_COMMANDS,
        help=f"commands per run, split over the submitters (default {DEFAULT_COMMANDS})",
    )
    parser.add_argument(
        "--submitters",
        type=positive_int_list,
        default=list(DEFAULT_SUBMITTERS),
        help="comma-separated submitter thread counts (default 1,16,64)",
    )
    parser.add_argument(
        "--dir",
        default=None,
        help="where to create the temporary directory for the database files "
        "(default: the system temp dir, normally /tmp)",
    )
    parser.add_argument(
        "--no-dbos", action="store_true", help="leave DBOS out even when it is installed"
    )
    parser.add_argument(
        "--no-turn-life",
        action="store_true",
        help="leave out the run of a turn's store writes (prompt queued + claimed, outcome)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dir is not None and not os.path.isdir(args.dir):
        print(f"--dir {args.dir}: no such directory", file=sys.stderr)
        return 2
    workdir = tempfile.mkdtemp(prefix="acp-store-bench-", dir=args.dir)
    try:
        progress(
            f"store throughput: {args.rounds} rounds x {args.commands} commands, "
            f"submitters {args.submitters}, in {workdir}"
        )
        dbos_runs: list[Run] | None = [] if dbos_side.available() and not args.no_dbos else None
        turn_runs: list[Run] | None = None if args.no_turn_life else []
        baseline, store_runs = measure(
            workdir, args.rounds, args.commands, args.submitters, dbos_runs, turn_runs
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    config = {
        "rounds": args.rounds,
        "commands": args.commands,
        "submitters": args.submitters,
        "dir": workdir,
        "synchronous": Synchronous.FULL.value,
        "baseline_min_seconds": BASELINE_MIN_SECONDS,
    }
    report = summarise(baseline, store_runs, config)
    if dbos_runs:
        add_dbos(report, dbos_runs, max(args.submitters))
    if turn_runs:
        add_turn_life(report, turn_runs, baseline, max(args.submitters))
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
