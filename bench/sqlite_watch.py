"""What the SQLite poller of other processes' commits (store/sqlite_watch.py) costs.

(a) *Turn*: two ``ControlPlane``s in this process, each on a SQLite file of its own with one
session of the bundled example agent; one has the poller (``on``, every 50 ms by default),
the other has it turned off (``ACPCTL_SQLITE_WATCH_POLL_S=0`` at its open: ``off``). A turn
is done as ``acpctl serve`` does one: a session watch opened, the prompt enqueued, the
watch's takes until the command's finished record, the watch closed; timed from the watch's
opening to its closing. With the poller on, this process's own commits change the file's
``data_version`` too, so during the turn the watch is caught up from the log about every
50 ms: the log reads it costs are counted (``log_reads``). Sides alternate, the order
rotating each round; medians, the ratio of medians (on / off) and the median of the
per-round ratios.

(b) *Idle*: one store, one session, one watcher open and nothing committed for ``--idle-s``
seconds: the CPU time (user + system, every thread of this process) with the poller on
and off, interleaved, and the poller's rounds.

Run from the repository root::

    python bench/sqlite_watch.py                  # 40 rounds + 2 x 2 idle windows of 10 s
    python bench/sqlite_watch.py --rounds 60 --chunks 100 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:  # ahead of bench/ itself, whose actors.py is not the package
    sys.path.insert(0, _REPO_ROOT)

from bench._common import machine_info, median, now, progress  # noqa: E402
from control_plane import ControlPlane, RuntimeSettings  # noqa: E402
from control_plane.agents import agent_from_command  # noqa: E402
from store import Store  # noqa: E402
from store.sqlite_watch import POLL_ENV  # noqa: E402
from tests.support.spawned import spawned_session  # noqa: E402

SIDES = ("on", "off")


@contextmanager
def _poll_setting(side: str) -> Iterator[None]:
    saved = os.environ.get(POLL_ENV)
    if side == "off":
        os.environ[POLL_ENV] = "0"
    else:
        os.environ.pop(POLL_ENV, None)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(POLL_ENV, None)
        else:
            os.environ[POLL_ENV] = saved


def _watched_turn(cp: ControlPlane, session_id: str, prompt: str) -> None:
    """One turn as serve does it: watch, enqueue, take until the command's end, unwatch."""
    woken = threading.Event()
    watch = cp.watch_session(session_id, woken.set)
    try:
        command = cp.prompt(session_id, prompt)
        while True:
            if not woken.wait(60):
                raise RuntimeError("no commit for 60 s")
            woken.clear()
            share = watch.take()
            for record in share.finished:
                if record.id == command.id:
                    if record.state.value != "completed":
                        raise RuntimeError(f"the turn failed: {record}")
                    return
    finally:
        watch.close()


def _count_log_reads(cp: ControlPlane) -> list[int]:
    feeds = cp._store._commits.sessions
    read_after = feeds.read_after
    assert read_after is not None
    count = [0]

    def counted(session_id: str, after: int) -> Any:
        count[0] += 1
        return read_after(session_id, after)

    feeds.read_after = counted
    return count


def measure_turns(workdir: str, rounds: int, warmup: int, chunks: int) -> dict[str, Any]:
    agent = agent_from_command(
        [sys.executable, "-m", "protocol.example_agent", "--state-file", f"{workdir}/a.json"]
    )
    prompt = f"#chunks={chunks}"
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    cps: dict[str, ControlPlane] = {}
    sessions: dict[str, str] = {}
    reads: dict[str, list[int]] = {}
    try:
        for side in SIDES:
            os.makedirs(f"{workdir}/{side}")
            settings = replace(RuntimeSettings(), log_dir=f"{workdir}/{side}/logs")
            with _poll_setting(side):
                cps[side] = ControlPlane.open(f"{workdir}/{side}/cp.db", settings=settings)
            sessions[side] = cps[side].spawn(agent, workdir, "warm up").session.id
            reads[side] = _count_log_reads(cps[side])
        assert cps["on"]._store.other_writers is not None
        assert cps["off"]._store.other_writers is None
        reads_at_start = dict.fromkeys(SIDES, 0)
        for r in range(warmup + rounds):
            if r == warmup:
                reads_at_start = {side: reads[side][0] for side in SIDES}
            order = SIDES if r % 2 == 0 else SIDES[::-1]
            for side in order:
                start = now()
                _watched_turn(cps[side], sessions[side], prompt)
                if r >= warmup:
                    times[side].append((now() - start) * 1000.0)
            if (r + 1) % 10 == 0:
                progress(f"round {r + 1}: on {median(times['on']):.2f} ms, off "
                         f"{median(times['off']):.2f} ms")  # fmt: skip
    finally:
        for cp in cps.values():
            cp.close()
    on, off = median(times["on"]), median(times["off"])
    return {
        "rounds": rounds,
        "chunks": chunks,
        "on_ms": on,
        "off_ms": off,
        "ratio_of_medians": on / off,
        "median_paired_ratio": median(
            [a / b for a, b in zip(times["on"], times["off"], strict=True)]
        ),
        "log_reads_per_turn": {
            side: (reads[side][0] - reads_at_start[side]) / rounds for side in SIDES
        },
    }


def measure_idle(workdir: str, idle_s: float, windows: int) -> dict[str, Any]:
    cpu: dict[str, list[float]] = {side: [] for side in SIDES}
    polls: list[int] = []
    for w in range(windows):
        for side in SIDES if w % 2 == 0 else SIDES[::-1]:
            path = f"{workdir}/idle-{side}-{w}.db"
            with _poll_setting(side), Store.open(path) as store:
                sid, _ = spawned_session(store, __import__("pathlib").Path(workdir))
                watch = store.watch.session(sid, lambda: None)
                time.sleep(0.2)  # the poller's thread started, the open settled
                before = time.process_time()
                first = store.other_writers.polls if store.other_writers else 0
                time.sleep(idle_s)
                cpu[side].append((time.process_time() - before) * 1000.0)
                if store.other_writers is not None:
                    polls.append(store.other_writers.polls - first)
                watch.close()
    return {
        "idle_s": idle_s,
        "windows": windows,
        "cpu_ms_on": median(cpu["on"]),
        "cpu_ms_off": median(cpu["off"]),
        "cpu_share_on": median(cpu["on"]) / 1000.0 / idle_s,
        "polls_per_s": median(polls) / idle_s if polls else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=100)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--idle-windows", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="acpctl-sqlite-watch-")
    try:
        report = {
            "turn": measure_turns(workdir, args.rounds, args.warmup, args.chunks),
            "idle": measure_idle(workdir, args.idle_s, args.idle_windows),
            "machine": machine_info(),
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    turn, idle = report["turn"], report["idle"]
    print(
        f"a watched turn ('#chunks={turn['chunks']}'), {turn['rounds']} rounds, interleaved\n"
        f"poller on: {turn['on_ms']:.2f} ms, off: {turn['off_ms']:.2f} ms = "
        f"{turn['ratio_of_medians']:.3f}x (paired median {turn['median_paired_ratio']:.3f}x); "
        f"log reads per turn: on {turn['log_reads_per_turn']['on']:.1f}, "
        f"off {turn['log_reads_per_turn']['off']:.1f}\n"
        f"idle, one watcher, {idle['idle_s']:.0f} s: CPU on {idle['cpu_ms_on']:.1f} ms, "
        f"off {idle['cpu_ms_off']:.1f} ms ({100 * idle['cpu_share_on']:.3f} % of a core on); "
        f"{idle['polls_per_s']:.1f} checks/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
