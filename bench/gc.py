"""What retention's deletion costs live turns: the p99 of a turn while ``acpctl gc``'s
deletion runs, against the p99 without it, in one run.

One ``ControlPlane`` on a real SQLite store runs example-agent turns (``#chunks=N``), one at
a time, each timed from ``prompt`` to its outcome being durable (``wait``). The store holds
``--events`` events (default 1,000,000) in closed sessions, seeded through the store's own
appends; a gc (``control_plane.retention.run.run_gc``, the same pass ``acpctl gc`` runs, on
the control plane's own store: one writer) deletes them in a background thread.

The two sides alternate in rounds of ``--turns`` turns, the order rotating each round:

* *gc*: the deletion runs (short paced transactions, control_plane/retention/pacing.py);
* *no gc*: the deletion is parked between two of its transactions.

A turn counts for the gc side only if the deletion was still running when it ended; the run
ends when the deletion has deleted everything. The report gives each side's p99 and median,
their ratios (target: p99 with gc <= 1.5x without, issue 42), and each deletion
transaction's lock time, max and p99 (target <= 50 ms), measured from its first statement
to its commit being acknowledged.

Run from the repository root::

    python bench/gc.py                       # 1,000,000 events, ~2-4 min
    python bench/gc.py --events 200000 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
from dataclasses import replace
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:  # ahead of bench/ itself, whose actors.py is not the package
    sys.path.insert(0, _REPO_ROOT)

from bench._common import (  # noqa: E402
    machine_info,
    median,
    now,
    percentile,
    positive_int,
    progress,
)
from control_plane import ControlPlane, Decision, PermissionPolicy, RuntimeSettings  # noqa: E402
from control_plane.agents import agent_from_command  # noqa: E402
from control_plane.retention.pacing import Pace, Pacer  # noqa: E402
from control_plane.retention.policy import RetentionPolicy  # noqa: E402
from control_plane.retention.report import GcReport  # noqa: E402
from control_plane.retention.run import run_gc  # noqa: E402
from state_machines.event_kinds import EventKind  # noqa: E402
from store import AgentSpec, NewEvent, Store  # noqa: E402

P99_TARGET = 1.5
LOCK_TARGET_MS = 50.0
SIDES = ("gc", "no gc")
# What an agent's streamed update looks like in the log (~200 bytes).
_UPDATE = {
    "jsonrpc": "2.0",
    "method": "session/update",
    "params": {
        "sessionId": "s",
        "update": {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "some streamed words of an agent's answer "},
        },
    },
}


def seed(store: Store, events: int, sessions: int) -> None:
    """``events`` events in ``sessions`` closed sessions, through the store's appends (a
    few multi-row inserts per call)."""
    agent = AgentSpec("seed", (sys.executable, "-c", "pass"))
    per_session = events // sessions
    started = now()
    for i in range(sessions):
        sid = store.spawn(agent, "/tmp").session.id
        left = per_session - 2  # session_created and closed are events too
        while left > 0:
            n = min(left, 10_000)
            store.append_events(sid, None, [NewEvent(EventKind.SESSION_UPDATE, _UPDATE)] * n)
            left -= n
        store.close_session(sid)
        if (i + 1) % 20 == 0:
            progress(f"seeded {(i + 1) * per_session} events ({now() - started:.0f} s)")


class ParkableGc:
    """The gc pass in a thread, parked between two of its transactions while the gate is
    closed."""

    def __init__(self, store: Store, pace: Pace) -> None:
        self.gate = threading.Event()
        self.parked = threading.Event()
        self.pacer = Pacer(pace, between=self._between)
        self.report: GcReport | None = None
        self.error: BaseException | None = None
        self.started = self.finished = 0.0
        self._store = store
        self._thread = threading.Thread(target=self._run, name="bench-gc", daemon=True)

    def _between(self) -> None:
        if not self.gate.is_set():
            self.parked.set()
            self.gate.wait()
            self.parked.clear()

    def _run(self) -> None:
        self.started = now()
        try:
            self.report = run_gc(self._store, RetentionPolicy("0s", ("closed",)), self.pacer)
        except BaseException as exc:
            self.error = exc
        finally:
            self.finished = now()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self.gate.set()
        self._thread.start()

    def run(self) -> None:
        self.gate.set()

    def park(self) -> None:
        """Close the gate and wait until the deletion is between two transactions."""
        self.gate.clear()
        while self.running and not self.parked.wait(0.01):
            pass


def measure(workdir: str, args: argparse.Namespace) -> dict[str, Any]:
    settings = RuntimeSettings(permission_policy=PermissionPolicy(Decision.ALLOW))
    settings = replace(settings, log_dir=os.path.join(workdir, "logs"))
    agent = agent_from_command(
        [sys.executable, "-m", "protocol.example_agent", "--state-file", f"{workdir}/a.json"]
    )
    prompt = f"#chunks={args.chunks}"
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    db = os.path.join(workdir, "cp.db")
    with Store.open(db) as seeding:  # before the runtime: it would start agents for them
        seed(seeding, args.events, args.sessions)
    with ControlPlane.open(db, settings=settings) as cp:
        store = cp._store  # the control plane's own store: the gc shares its one writer
        sides = {side: cp.spawn(agent, workdir, "warm up").session.id for side in SIDES}
        for _ in range(args.warmup):
            for side in SIDES:
                cp.wait(cp.prompt(sides[side], prompt).id, 60)
        pace = Pace(target_s=args.target_ms / 1000.0, rest_ratio=args.rest_ratio)
        gc = ParkableGc(store, pace)
        gc.start()
        rounds = 0
        while gc.running:
            order = SIDES if rounds % 2 == 0 else SIDES[::-1]
            for side in order:
                if side == "gc":
                    gc.run()
                else:
                    gc.park()
                for _ in range(args.turns):
                    start = now()
                    outcome = cp.wait(cp.prompt(sides[side], prompt).id, 60)
                    elapsed = (now() - start) * 1000.0
                    if not outcome.ok:
                        raise RuntimeError(f"{side}: the turn failed: {outcome}")
                    if side == "no gc" or gc.running:
                        times[side].append(elapsed)
            gc.run()
            rounds += 1
            if rounds % 10 == 0:
                progress(
                    f"round {rounds}: {gc.pacer.locks.count} deletion transactions; p99 "
                    f"gc {percentile(times['gc'], 0.99):.1f} ms, "
                    f"no gc {percentile(times['no gc'], 0.99):.1f} ms"
                )
        if gc.error is not None:
            raise gc.error
    assert gc.report is not None
    locks = gc.pacer.locks
    p99 = {side: percentile(times[side], 0.99) for side in SIDES}
    med = {side: median(times[side]) for side in SIDES}
    lock_max = max(locks.seconds, default=0.0) * 1000.0
    lock_p99 = locks.quantile(0.99) * 1000.0
    return {
        "events": gc.report.events_deleted,
        "sessions": gc.report.sessions_deleted,
        "chunks": args.chunks,
        "turns": {side: len(times[side]) for side in SIDES},
        "p99_ms": p99,
        "median_ms": med,
        "p99_ratio": p99["gc"] / p99["no gc"],
        "median_ratio": med["gc"] / med["no gc"],
        "deletion_transactions": locks.count,
        "lock_max_ms": lock_max,
        "lock_p99_ms": lock_p99,
        # Wall time of the pass, parked time included.
        "gc_seconds": gc.finished - gc.started,
        "space": None if gc.report.space is None else gc.report.space.to_json(),
        "pace": {"target_ms": args.target_ms, "rest_ratio": args.rest_ratio},
        "target": {"p99_ratio": P99_TARGET, "lock_ms": LOCK_TARGET_MS},
        "met": p99["gc"] / p99["no gc"] <= P99_TARGET and lock_max <= LOCK_TARGET_MS,
        "machine": machine_info(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=positive_int, default=1_000_000)
    parser.add_argument("--sessions", type=positive_int, default=100)
    parser.add_argument("--turns", type=positive_int, default=10, help="turns per side a round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--target-ms", type=float, default=Pace().target_s * 1000.0)
    parser.add_argument("--rest-ratio", type=float, default=Pace().rest_ratio)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="acpctl-gc-bench-")
    try:
        report = measure(workdir, args)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    verdict = "MET" if report["met"] else "NOT MET"
    p99, med = report["p99_ms"], report["median_ms"]
    print(
        f"a turn ('#chunks={report['chunks']}'), interleaved with and without gc deleting "
        f"{report['events']} events ({report['sessions']} sessions); "
        f"turns: {report['turns']['gc']} with gc, {report['turns']['no gc']} without\n"
        f"p99:    gc {p99['gc']:.1f} ms, no gc {p99['no gc']:.1f} ms = "
        f"{report['p99_ratio']:.2f}x (target <= {P99_TARGET}x)\n"
        f"median: gc {med['gc']:.1f} ms, no gc {med['no gc']:.1f} ms = "
        f"{report['median_ratio']:.2f}x\n"
        f"deletion: {report['deletion_transactions']} transactions, lock max "
        f"{report['lock_max_ms']:.1f} ms, p99 {report['lock_p99_ms']:.1f} ms "
        f"(target <= {LOCK_TARGET_MS:.0f} ms); {report['gc_seconds']:.0f} s in all, parked "
        f"half of it\n"
        f"{verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
