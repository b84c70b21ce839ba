"""Subagent fan-out: one parent spawns N children (``mode="run"``, ``announce=True``) and
waits for every announce, with ``max_running_children`` capped at each of ``--caps``.

What is measured
----------------
One run per cap, each on a fresh store in a fresh temporary directory, with the bundled
example agent as real subprocesses (an agent start costs ~1.3 s of CPU). The parent is
spawned without a prompt and its agent is started *before* the clock starts. Then the
children are spawned back to back (``#chunks=3 child i``: a three-chunk reply, no delay).
Every child gets its own agent state file, so agents do not contend on one file lock.

*Wall*: from just before the first spawn to the ``created_at`` of the last ``announce``
event in the parent's log (``created_at`` is ``time.time()`` inside the writing
transaction, so "committed" is this plus at most one group commit).

Per child, from the ``created_at`` of events in the store (medians, min/max):

* ``created -> agent_started``: ``session_created`` (the spawn transaction) to
  ``agent_started`` (after initialize + session/new). This is the agent start *including*
  the wait for a turn slot and for one of ``max_concurrent_starts`` start permits.
* ``agent_started -> prompt``: the wait for the ``max_running_children`` cap (the ``prompt``
  event is written when the turn is claimed).
* ``prompt -> 1st update``: the first ``session_update`` of the turn (the agent's first
  byte, recorded).
* ``created -> 1st update``: "spawn to first agent byte", the sum of the three above.
* ``turn_ended -> announce``: the child's ``turn_ended`` to the parent's ``announce`` event
  for that child's run (the delivery/announce path).
* ``cap hand-off``: for a child held back by the cap (``cap`` siblings running when its
  agent had started, and a sibling's turn ended before its ``prompt``), from the latest
  sibling ``turn_ended`` before its ``prompt`` to that ``prompt``: how fast a freed running
  slot is reused.

Concurrency: *running (poll)* is the peak number of children in ``running``/``cancelling``
seen by polling the store every ``POLL_S``; *running (events)* is the exact peak of
overlapping ``prompt``..``turn_ended`` intervals; *child agent processes* the peak of
overlapping agent exec..``closed`` intervals (children whose agent process is up, starting
or started); *turn slots held* is ``TurnSlots.peak`` (the parent's slot included).

Settings: ``RuntimeSettings`` defaults (sweep 1 s, discovery 5 s, ``max_concurrent_starts``
4) except ``max_running_children`` = cap, ``max_running_turns`` = cap + 1 (the parent, which
gets one follow-up prompt per announce, needs a slot too), ``subagent_limits.max_children``
= N and permissions allowed.

Run from the repository root::

    python bench/fanout.py                      # 50 children, caps 8 and 32: a few minutes
    python bench/fanout.py --children 10 --caps 4
    python bench/fanout.py --json > fanout.json
    python bench/fanout.py --agent-nice 10      # agents nicer than the control plane
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:  # ahead of bench/ itself, whose actors.py is not the package
    sys.path.insert(0, _REPO_ROOT)

from actors.settings import RuntimeSettings  # noqa: E402
from bench._common import (  # noqa: E402
    machine_info,
    median,
    peak_rss_mb,
    positive_int,
    positive_int_list,
    progress,
    spread,
)
from control_plane import ControlPlane, SessionState  # noqa: E402
from protocol.agent.permissions import Decision, PermissionPolicy  # noqa: E402
from store import AgentSpec, EventRecord, SubagentLimits  # noqa: E402

DEFAULT_CHILDREN = 50
DEFAULT_CAPS = (8, 32)
POLL_S = 0.05
PARENT_START_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 900.0
CLOSE_TIMEOUT_S = 60.0
RUNNING_STATES = frozenset({SessionState.RUNNING, SessionState.CANCELLING})

# (key, label) of the per-child intervals, in report order.
METRICS: tuple[tuple[str, str], ...] = (
    ("spawn_call", "spawn() call"),
    ("created_to_exec", "created -> agent exec"),
    ("exec_to_agent_started", "agent exec -> agent_started"),
    ("created_to_agent_started", "created -> agent_started"),
    ("agent_started_to_prompt", "agent_started -> prompt"),
    ("prompt_to_first_update", "prompt -> 1st update"),
    ("created_to_first_update", "created -> 1st update"),
    ("turn_ended_to_announce", "turn_ended -> announce"),
    ("cap_handoff", "cap hand-off"),
)


# ``python -m protocol.example_agent`` with one addition: the interpreter first writes
# ``time.time()`` to a file, so the agent start splits into "until the process runs" (slot,
# start permit, fork/exec) and "the agent starting" (imports, initialize, session/new).
_EXEC_STAMP = (
    "import runpy, sys, time\n"
    "with open(sys.argv[1], 'w') as f: f.write(repr(time.time()))\n"
    "sys.argv = [sys.argv[0], *sys.argv[2:]]\n"
    "runpy.run_module('protocol.example_agent', run_name='__main__', alter_sys=True)\n"
)


def exec_stamp_path(tmp: Path, name: str) -> Path:
    return tmp / f"exec-{name}.txt"


def agent_spec(tmp: Path, name: str) -> AgentSpec:
    return AgentSpec(
        "example-agent",
        (
            sys.executable,
            "-c",
            _EXEC_STAMP,
            str(exec_stamp_path(tmp, name)),
            "--state-file",
            str(tmp / f"agent-state-{name}.json"),
        ),
    )


def read_exec_stamp(path: Path) -> float | None:
    try:
        return float(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@dataclass
class ChildTimes:
    """Event times (epoch seconds) of one child; None when the event is missing."""

    session_id: str
    spawn_call: float | None = None
    created: float | None = None
    exec_at: float | None = None
    agent_started: float | None = None
    prompt: float | None = None
    first_update: float | None = None
    turn_ended: float | None = None
    closed: float | None = None
    announce: float | None = None
    status: str | None = None
    kinds: list[str] = field(default_factory=list)


@dataclass
class CapRun:
    cap: int
    children: int
    wall_s: float
    wall_polled_s: float
    peak_running_polled: int
    peak_running_events: int
    peak_live_agents: int
    agent_processes: int
    peak_turn_slots: int
    statuses: dict[str, int]
    metrics: dict[str, list[float]]
    missing: dict[str, int]


def _ts(event: EventRecord) -> float:
    return event.created_at.timestamp()


def child_times(session_id: str, events: Iterable[EventRecord]) -> ChildTimes:
    times = ChildTimes(session_id)
    for event in events:
        times.kinds.append(event.kind)
        at = _ts(event)
        if event.kind == "session_created" and times.created is None:
            times.created = at
        elif event.kind == "agent_started" and times.agent_started is None:
            times.agent_started = at
        elif event.kind == "prompt" and times.prompt is None:
            times.prompt = at
        elif (
            event.kind == "session_update"
            and event.command_id is not None  # the turn's, not the agent's slash commands
            and times.first_update is None
        ):
            times.first_update = at
        elif event.kind in ("turn_ended", "turn_failed") and times.turn_ended is None:
            times.turn_ended = at
        elif event.kind == "closed" and times.closed is None:
            times.closed = at
    return times


def peak_overlap(intervals: Sequence[tuple[float, float]]) -> int:
    """Largest number of [start, end) intervals open at one instant (an end at t frees
    before a start at t: the cap check sees the committed end first)."""
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    peak = level = 0
    for _, step in points:
        level += step
        peak = max(peak, level)
    return peak


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def per_child_metrics(
    kids: list[ChildTimes], cap: int
) -> tuple[dict[str, list[float]], dict[str, int]]:
    metrics: dict[str, list[float]] = {key: [] for key, _ in METRICS}
    missing: dict[str, int] = {key: 0 for key, _ in METRICS}
    turns = [(k.prompt, k.turn_ended) for k in kids if k.prompt is not None]
    ends = sorted(k.turn_ended for k in kids if k.turn_ended is not None)
    for kid in kids:
        values = {
            "spawn_call": kid.spawn_call,
            "created_to_exec": _diff(kid.created, kid.exec_at),
            "exec_to_agent_started": _diff(kid.exec_at, kid.agent_started),
            "created_to_agent_started": _diff(kid.created, kid.agent_started),
            "agent_started_to_prompt": _diff(kid.agent_started, kid.prompt),
            "prompt_to_first_update": _diff(kid.prompt, kid.first_update),
            "created_to_first_update": _diff(kid.created, kid.first_update),
            "turn_ended_to_announce": _diff(kid.turn_ended, kid.announce),
        }
        for key, value in values.items():
            if value is None:
                missing[key] += 1
            else:
                metrics[key].append(value)
        started = kid.agent_started
        if started is not None and kid.prompt is not None:
            running = sum(1 for p, e in turns if p <= started and (e is None or e > started))
            freed = [t for t in ends if started < t <= kid.prompt]
            if running >= cap and freed:  # held back by the cap until a sibling's turn ended
                metrics["cap_handoff"].append(kid.prompt - freed[-1])
    return metrics, missing


def run_cap(workdir: Path, cap: int, children: int, share: int = 1, agent_nice: int = 0) -> CapRun:
    tmp = Path(tempfile.mkdtemp(prefix=f"cap{cap}-", dir=workdir))
    settings = replace(
        RuntimeSettings(),
        permission_policy=PermissionPolicy(Decision.ALLOW),
        max_running_children=cap,
        max_running_turns=cap + 1,
        sessions_per_agent=share,
        agent_nice=agent_nice,
        subagent_limits=replace(SubagentLimits(), max_children=max(children, 50)),
        log_dir=str(tmp / "agent-logs"),
    )
    with ControlPlane.open(tmp / "cp.db", settings=settings) as cp:
        parent = cp.spawn(agent_spec(tmp, "parent"), tmp).session.id
        deadline = time.monotonic() + PARENT_START_TIMEOUT_S
        while cp.get(parent).state is not SessionState.IDLE:
            if time.monotonic() > deadline:
                raise RuntimeError(f"parent agent not started: {cp.get(parent)}")
            time.sleep(POLL_S)

        peak_polled = 0
        announced = 0
        stop = threading.Event()

        def poll() -> None:
            nonlocal peak_polled, announced
            while not stop.is_set():
                kids = cp.children(parent)
                running = sum(1 for k in kids if k.state in RUNNING_STATES)
                peak_polled = max(peak_polled, running)
                announced = sum(1 for e in cp.events(parent) if e.kind == "announce")
                stop.wait(POLL_S)

        ids: list[str] = []
        spawn_calls: list[float] = []
        t0 = time.time()
        for i in range(children):
            before = time.perf_counter()
            spawned = cp.spawn(
                # Sharing agent processes: one command (one state file) for all children.
                agent_spec(tmp, "children" if share > 1 else f"child-{i}"),
                tmp,
                f"#chunks=3 child {i}",
                parent=parent,
                mode="run",
                announce=True,
            )
            spawn_calls.append(time.perf_counter() - before)
            ids.append(spawned.session.id)
        spawned_s = time.time() - t0
        poller = threading.Thread(target=poll, name="fanout-poll", daemon=True)
        poller.start()
        deadline = time.monotonic() + RUN_TIMEOUT_S
        last_report = time.monotonic()
        try:
            while announced < children:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cap {cap}: {announced}/{children} announces in time")
                if time.monotonic() - last_report >= 10:
                    last_report = time.monotonic()
                    progress(
                        f"  cap {cap}: {announced}/{children} announced, {time.time() - t0:.0f} s"
                    )
                time.sleep(POLL_S)
            wall_polled = time.time() - t0
        finally:
            stop.set()
            poller.join()
        progress(f"  cap {cap}: spawns took {spawned_s:.2f} s; all announced")
        # mode=run children close (agent stopped) shortly after their turn: wait for that,
        # outside the timed part, so every live-agent interval has its end.
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        while any(k.state is not SessionState.CLOSED for k in cp.children(parent)):
            if time.monotonic() > deadline:
                progress(f"  cap {cap}: not every child closed within {CLOSE_TIMEOUT_S:.0f} s")
                break
            time.sleep(POLL_S)

        announces = [e for e in cp.events(parent) if e.kind == "announce"]
        kids = {sid: child_times(sid, cp.events(sid)) for sid in ids}
        for i, sid in enumerate(ids):
            kids[sid].spawn_call = spawn_calls[i]
            kids[sid].exec_at = read_exec_stamp(exec_stamp_path(tmp, f"child-{i}"))
        for event in announces:
            kid = kids.get(str(event.payload.get("childSessionId")))
            if kid is not None and kid.announce is None:
                kid.announce = _ts(event)
                kid.status = str(event.payload.get("status"))
        peak_slots = cp._supervisor.slots.peak
        # Counted for both modes (a process per child, or shared): the distinct agent pids.
        agent_pids = {
            e.payload.get("pid") for sid in ids for e in cp.events(sid) if e.kind == "agent_started"
        }

    kid_list = list(kids.values())
    statuses: dict[str, int] = {}
    for kid in kid_list:
        statuses[kid.status or "none"] = statuses.get(kid.status or "none", 0) + 1
    metrics, missing = per_child_metrics(kid_list, cap)
    running = [
        (k.prompt, k.turn_ended)
        for k in kid_list
        if k.prompt is not None and k.turn_ended is not None
    ]
    live = [
        (k.exec_at, k.closed) for k in kid_list if k.exec_at is not None and k.closed is not None
    ]
    shutil.rmtree(tmp, ignore_errors=True)
    return CapRun(
        cap=cap,
        children=children,
        wall_s=max(_ts(e) for e in announces) - t0,
        wall_polled_s=wall_polled,
        peak_running_polled=peak_polled,
        peak_running_events=peak_overlap(running),
        peak_live_agents=peak_overlap(live),
        agent_processes=len(agent_pids),
        peak_turn_slots=peak_slots,
        statuses=statuses,
        metrics=metrics,
        missing=missing,
    )


def summarise(runs: list[CapRun], config: dict[str, Any]) -> dict[str, Any]:
    report: dict[str, Any] = {"config": config, "machine": machine_info(), "caps": {}}
    for run in runs:
        entry: dict[str, Any] = {
            "max_running_children": run.cap,
            "max_running_turns": run.cap + 1,
            "children": run.children,
            "wall_s": run.wall_s,
            "wall_polled_s": run.wall_polled_s,
            "children_per_s": run.children / run.wall_s if run.wall_s > 0 else float("nan"),
            "peak_running_polled": run.peak_running_polled,
            "peak_running_events": run.peak_running_events,
            "peak_live_agents": run.peak_live_agents,
            "agent_processes": run.agent_processes,
            "peak_turn_slots": run.peak_turn_slots,
            "statuses": run.statuses,
            "metrics": {},
        }
        for key, _ in METRICS:
            values = run.metrics[key]
            entry["metrics"][key] = {
                "n": len(values),
                "missing": run.missing[key],
                "median_ms": median(values) * 1000,
                "min_max_ms": [v * 1000 for v in spread(values)],
            }
        report["caps"][str(run.cap)] = entry
    report["peak_rss_mb"] = peak_rss_mb()
    return report


def print_report(report: dict[str, Any]) -> None:
    cfg, mach = report["config"], report["machine"]
    print(
        f"subagent fan-out: 1 parent -> {cfg['children']} children (mode=run, announce=True, "
        f"'#chunks=3 child i'), example agent as subprocesses\n"
        f"one run per cap; max_running_turns = cap + 1, max_concurrent_starts "
        f"{cfg['max_concurrent_starts']}, agent nice {cfg.get('agent_nice', 0)}\n"
        f"Python {mach['python']}, SQLite {mach['sqlite']}, "
        f"SQLAlchemy {mach.get('sqlalchemy', '?')}, {mach['cpus']} CPUs, {mach['platform']}"
    )
    caps = list(report["caps"].values())
    label_w = 30
    col_w = 22
    print()
    header = f"{'max_running_children':<{label_w}}" + "".join(
        f"{e['max_running_children']:>{col_w}}" for e in caps
    )
    print(header)
    print("-" * len(header))

    def row(label: str, cells: list[str]) -> None:
        print(f"{label:<{label_w}}" + "".join(f"{c:>{col_w}}" for c in cells))

    row("wall, 1st spawn -> last announce", [f"{e['wall_s']:.1f} s" for e in caps])
    row("  (seen by the poller)", [f"{e['wall_polled_s']:.1f} s" for e in caps])
    row("children/s", [f"{e['children_per_s']:.2f}" for e in caps])
    row("peak running (poll)", [str(e["peak_running_polled"]) for e in caps])
    row("peak running (events)", [str(e["peak_running_events"]) for e in caps])
    row("peak child agent processes", [str(e["peak_live_agents"]) for e in caps])
    row("agent processes started", [str(e["agent_processes"]) for e in caps])
    row("peak turn slots held", [str(e["peak_turn_slots"]) for e in caps])
    row(
        "announce statuses",
        [",".join(f"{k}={v}" for k, v in sorted(e["statuses"].items())) for e in caps],
    )
    print()
    print(f"{'per child, median [min..max] ms':<{label_w}}")
    for key, label in METRICS:
        cells = []
        for e in caps:
            m = e["metrics"][key]
            if not m["n"]:
                cells.append("-")
                continue
            lo, hi = m["min_max_ms"]
            cell = f"{m['median_ms']:.0f} [{lo:.0f}..{hi:.0f}]"
            if key == "cap_handoff" or m["missing"]:
                cell += f" n={m['n']}"
            cells.append(cell)
        row(label, cells)
    print()
    print(
        "created = session_created (spawn tx); agent exec = the agent's interpreter running "
        "(after a turn slot, a start permit,\nfork/exec and Python start-up); agent exec -> "
        "agent_started = imports + initialize + session/new;\nagent_started -> prompt = the "
        "wait for the running-children cap; cap hand-off = sibling turn_ended -> next "
        "held-back prompt."
    )
    print(f"peak RSS (bench process): {report['peak_rss_mb']:.0f} MiB")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="One parent fans out to N run-mode children with announce; wall time, "
        "per-child control-plane overhead and peak concurrency per max_running_children cap."
    )
    parser.add_argument(
        "--children",
        type=positive_int,
        default=DEFAULT_CHILDREN,
        help=f"children per run (default {DEFAULT_CHILDREN})",
    )
    parser.add_argument(
        "--caps",
        type=positive_int_list,
        default=list(DEFAULT_CAPS),
        help="comma-separated max_running_children values (default 8,32)",
    )
    parser.add_argument(
        "--sessions-per-agent",
        type=positive_int,
        default=1,
        help="children one agent process may hold (default 1: a process per child)",
    )
    parser.add_argument(
        "--agent-nice",
        type=int,
        default=RuntimeSettings().agent_nice,
        help="agents run this many steps nicer than the control plane (limits.agent_nice; "
        "default the setting's default, 10)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="acp-fanout-bench-"))
    runs: list[CapRun] = []
    try:
        for cap in args.caps:
            progress(f"fan-out: {args.children} children, max_running_children {cap}")
            runs.append(
                run_cap(workdir, cap, args.children, args.sessions_per_agent, args.agent_nice)
            )
            progress(f"  cap {cap}: wall {runs[-1].wall_s:.1f} s")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    config = {
        "children": args.children,
        "caps": args.caps,
        "dir": str(workdir),
        "max_concurrent_starts": RuntimeSettings().max_concurrent_starts,
        "sessions_per_agent": args.sessions_per_agent,
        "agent_nice": args.agent_nice,
        "poll_s": POLL_S,
    }
    report = summarise(runs, config)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
