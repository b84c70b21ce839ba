"""Per-turn overhead of ``acpctl serve`` against the SDK client talking to the agent directly,
and the throughput of ``acpctl batch`` at several ``-j``.

What is measured
----------------
(a) *Serve*: one ``#chunks=N`` turn (default 100) of the bundled example agent, driven by the
SDK's client (``acp.spawn_agent_process``) through one ``acpctl serve`` process (its own
store file, ``synchronous=FULL`` by default, the example agent as its backend). The turn goes
client -> serve -> durable command -> actor -> backend agent; every ``session/update`` is
written to the store and streamed back to the client from the event log.

*Baseline*: the same SDK client talking to one example agent process directly.

Each side has one process and one session, started, initialized and given ``--warmup``
untimed turns before the clock starts (serve starts its backend agent when the session is created;
the first turn may wait for that).
The sides are then interleaved turn by turn (the order alternates every round) so that they
see the same noise of a shared machine. A turn is timed around ``conn.prompt`` on one asyncio
loop. The client counts the ``agent_message_chunk`` updates of each turn: all N must have
arrived before the response, on both sides (checked every turn). The report gives medians
(ms per turn), min/max, the *ratio of medians* (serve / direct) and the median of the per-round
paired ratios. The issue's target: at most 1.3x. On Linux it also reports the CPU time
(user + system, from ``/proc``) per timed turn of the serve process, of its backend agent
and of the direct agent: on a 2-core machine the three processes of the serve side compete
for the cores, so serve's own CPU per turn bounds how close it can get.

*Relays* (``--relays``): the same turn, in the same interleaved rounds, through a process in
the middle that keeps nothing: ``bench/relay.py`` copying bytes on an asyncio loop, copying
bytes on two blocking threads, or parsing and writing again each JSON frame, and
``bench/relay.c`` copying bytes with ``poll``, and the same C relay durable first (each frame
appended to a SQLite file, WAL and ``synchronous=FULL``, one transaction per read, written on
after it committed; built when a C compiler and SQLite's headers are present). Each has an
example agent of its own. What they cost against the direct client is the floor for any
process between client and agent on this machine, serve included, and the floor of a
durable-first one.

(b) *Batch*: tasks/s of ``acpctl batch TASKS.jsonl --agent <example agent> -j J`` for J in
1, 8 and 32: ``--tasks`` tasks (default 32) of ``#chunks=5``, each run as a subprocess on a
fresh store in its own temporary directory, timed as the wall time of the whole command
(interpreter start, store creation, every task, results file). Every task is its own session;
the sessions share agent processes (``acpctl batch --sessions-per-agent``, default 8; an agent
start is about 1.3 s of CPU for the example agent on a slow 2-core machine). The CPU seconds
per task (the command and all its descendants, from ``RUSAGE_CHILDREN``) are reported next to
the rate. ``bench/serve_batch.py`` runs it.

Run from the repository root::

    python bench/serve_overhead.py                 # 30 turns per side + batch: ~2-3 minutes
    python bench/serve_overhead.py --turns 40 --skip-batch
    python bench/serve_overhead.py --tasks 16 --json > serve.json
    python bench/serve_overhead.py --skip-batch --limit record_interval_ms=1   # an A/B of a limit
    python bench/serve_overhead.py --skip-batch --turns 40 --relays   # beside the relays
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import socket
import sys
import tempfile
import urllib.request
from contextlib import AsyncExitStack
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:  # ahead of bench/ itself, whose actors.py is not the package
    sys.path.insert(0, _REPO_ROOT)

from acp import text_block  # noqa: E402

from bench import relay_sides, serve_batch  # noqa: E402
from bench._common import (  # noqa: E402
    acpctl_argv,
    add_turn_arguments,
    child_env,
    example_agent_argv,
    machine_info,
    median,
    now,
    peak_rss_mb,
    percentile,
    positive_int,
    positive_int_list,
    progress,
    turn_sides,
)
from bench.proc_sampling import child_pids, process_cpu_s  # noqa: E402
from bench.serve_ready import measure_ready  # noqa: E402
from bench.serve_report import (  # noqa: E402
    DIRECT,
    LABELS,
    SERVE,
    TURN_TARGET_RATIO,
    print_report,
)
from bench.serve_sides import START_TIMEOUT_S, Side, start_side  # noqa: E402

DEFAULT_TURNS = 30
DEFAULT_WARMUP = 3
DEFAULT_CHUNKS = 100
DEFAULT_TASKS = 32
DEFAULT_JOBS = (1, 8, 32)
DEFAULT_READY_ROUNDS = 7
HANDOFF_TURNS = 40  # also the CPU by thread: /proc counts the kernel share in 10 ms ticks
TURN_TIMEOUT_S = 60.0


# -- (a) per-turn overhead -------------------------------------------------------------------


def cpu_snapshot(sides: list[Side]) -> dict[str, float | None]:
    """CPU seconds so far of each side's process and, for serve, of its backend agent."""
    out: dict[str, float | None] = {}
    for side in sides:
        out[side.name] = process_cpu_s(side.pid)
        if side.name == SERVE:
            # Serve's children are the reapers; the backend agent is the reaper's child.
            tree = [p for r in child_pids(side.pid) for p in (r, *child_pids(r))]
            backends = [c for c in map(process_cpu_s, tree) if c is not None]
            out[SERVE + "_backend"] = sum(backends) if backends else None
        elif side.name in relay_sides.RELAYS:  # the relay's child is the agent
            backends = [c for c in map(process_cpu_s, child_pids(side.pid)) if c is not None]
            out[side.name + "_backend"] = sum(backends) if backends else None
    return out


async def run_turn(side: Side, text: str, chunks: int) -> float:
    """One prompt turn; ms. Raises unless ``end_turn`` with exactly ``chunks`` chunks before
    the response."""
    side.client.chunks = 0
    start = now()
    response = await asyncio.wait_for(
        side.conn.prompt(session_id=side.session_id, prompt=[text_block(text)]), TURN_TIMEOUT_S
    )
    elapsed = (now() - start) * 1000.0
    if response.stop_reason != "end_turn":
        raise RuntimeError(f"{side.name}: turn ended with {response.stop_reason!r}")
    if side.client.chunks != chunks:
        raise RuntimeError(
            f"{side.name}: {side.client.chunks} agent_message_chunk updates before the "
            f"response, expected {chunks}"
        )
    return elapsed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> str | None:
    """Serve's Prometheus metrics text, None when they cannot be read."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return str(r.read().decode())
    except OSError:
        return None


def commits_so_far(port: int) -> float | None:
    """Group commits serve's store writer has made (its Prometheus metrics: the count of
    ``acpctl_store_commit_seconds``), None when they cannot be read."""
    text = scrape(port)
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("acpctl_store_commit_seconds_count"):
            return float(line.split()[-1])
    return None


# More ``[limits]`` for the measured serve processes (``--limit KEY=VALUE``, for A/Bs).
EXTRA_LIMITS: dict[str, float] = {}


def serve_env(workdir: str, read_coalesce_ms: float | None) -> dict[str, str]:
    """The environment of the measured serve processes: no user configuration, and
    ``[limits] read_coalesce_ms`` (and any ``--limit``) when the command line sets it (an
    A/B of that setting)."""
    env = child_env(workdir)
    limits = dict(EXTRA_LIMITS)
    if read_coalesce_ms is not None:
        limits["read_coalesce_ms"] = read_coalesce_ms
    if limits:
        config = os.path.join(workdir, "serve-limits.toml")
        with open(config, "w", encoding="utf-8") as fh:
            fh.write("[limits]\n")
            fh.writelines(f"{key} = {value}\n" for key, value in limits.items())
        env["ACPCTL_CONFIG"] = config
    return env


async def measure_turns(
    workdir: str,
    turns: int,
    warmup: int,
    chunks: int,
    read_coalesce_ms: float | None = None,
    relays: bool = False,
) -> dict[str, Any]:
    text = f"#chunks={chunks} #stamp"
    env = serve_env(workdir, read_coalesce_ms)
    backend = shlex.join(example_agent_argv(os.path.join(workdir, "serve-agent-state.json")))
    metrics_port = free_port()
    serve_argv = acpctl_argv(
        os.path.join(workdir, "serve.db"),
        "serve",
        "--agent",
        backend,
        "--metrics",
        f"127.0.0.1:{metrics_port}",
    )
    direct_argv = example_agent_argv(os.path.join(workdir, "direct-agent-state.json"))
    async with AsyncExitStack() as stack:
        progress("starting acpctl serve and the direct agent (~1.5-3 s each)")
        start = now()
        serve = await asyncio.wait_for(
            start_side(stack, SERVE, serve_argv, workdir, env), START_TIMEOUT_S
        )
        serve_ready = now() - start
        start = now()
        direct = await asyncio.wait_for(
            start_side(stack, DIRECT, direct_argv, workdir, env), START_TIMEOUT_S
        )
        direct_ready = now() - start
        sides = [serve, direct]
        # The least any process in the middle costs, timed in the same rounds: always the
        # durable C relay (the target's reference), all relays with --relays.

        def agent_of(tag: str) -> list[str]:
            return example_agent_argv(os.path.join(workdir, f"{tag}-agent-state.json"))

        names = None if relays else (relay_sides.DURABLE,)
        commands, missing = relay_sides.relay_commands(workdir, agent_of, names)
        if missing:
            progress(missing)
        for name, argv in commands:
            sides.append(
                await asyncio.wait_for(start_side(stack, name, argv, workdir, env), START_TIMEOUT_S)
            )
        first_turn_ms: dict[str, float] = {}
        for side in sides:
            for i in range(warmup):
                elapsed = await run_turn(side, text, chunks)
                if i == 0:
                    first_turn_ms[side.name] = elapsed
        cpu_before = cpu_snapshot(sides)
        commits_before = await asyncio.to_thread(commits_so_far, metrics_port)
        for side in sides:
            side.client.timing = True
        for r in range(turns):
            # Each side takes each place in the order in turn (two sides: alternately).
            shift = r % len(sides)
            order = sides[shift:] + sides[:shift]
            for side in order:
                side.times_ms.append(await run_turn(side, text, chunks))
            if (r + 1) % 10 == 0 or r + 1 == turns:
                # The last ten turns' median, not the running one: a session that slows down
                # over many turns shows here (--turns 1500).
                progress(
                    f"turn {r + 1}/{turns}: last 10 "
                    + ", ".join(f"{s.name} {median(s.times_ms[-10:]):.1f} ms" for s in sides)
                )
        cpu_after = cpu_snapshot(sides)
        commits_after = await asyncio.to_thread(commits_so_far, metrics_port)
        for side in sides:
            side.client.timing = False
        commits_per_turn = (
            None
            if commits_before is None or commits_after is None
            else (commits_after - commits_before) / turns
        )
        cpu_ms_per_turn = {
            name: (after - before) * 1000.0 / turns
            for name, after in cpu_after.items()
            if after is not None and (before := cpu_before.get(name)) is not None
        }
        return {
            "sides": {s.name: s.times_ms for s in sides},
            "ready_s": {SERVE: serve_ready, DIRECT: direct_ready},
            "first_warmup_turn_ms": first_turn_ms,
            "cpu_ms_per_turn": cpu_ms_per_turn,
            "commits_per_turn": commits_per_turn,
            "update_latency_ms": {s.name: s.client.latencies_ms for s in sides},
        }


# Threads that only answer the bench's own metrics scrapes (the Prometheus client's HTTP
# server): their hand-offs are the measurement's, not serve's.
SCRAPE_THREADS = ("process_request_thread", "serve_forever")


async def count_handoffs(
    workdir: str, turns: int, warmup: int, chunks: int, read_coalesce_ms: float | None = None
) -> dict[str, Any]:
    """Thread hand-offs per turn inside serve, counted (``bench/handoffs.py``): a second serve
    process, untimed, with every hand-off primitive counted, ``turns`` turns like the timed
    ones. Returns the total per turn and the breakdown by primitive and posting thread."""
    env = serve_env(workdir, read_coalesce_ms)
    backend = shlex.join(example_agent_argv(os.path.join(workdir, "counted-agent-state.json")))
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "bench.handoffs",
        "--db",
        os.path.join(workdir, "counted.db"),
        "serve",
        "--agent",
        backend,
        "--metrics",
        f"127.0.0.1:{port}",
    ]
    text = f"#chunks={chunks}"
    async with AsyncExitStack() as stack:
        progress(f"counting serve's thread hand-offs over {turns} more turns (untimed)")
        side = await asyncio.wait_for(
            start_side(stack, "counted", argv, workdir, env), START_TIMEOUT_S
        )
        for _ in range(warmup):
            await run_turn(side, text, chunks)
        before = await asyncio.to_thread(scrape, port)
        for _ in range(turns):
            await run_turn(side, text, chunks)
        after = await asyncio.to_thread(scrape, port)
    if before is None or after is None:
        return {}
    from bench.handoffs import parse, parse_cpu

    start, end = parse(before), parse(after)
    per_turn = {
        f"{primitive} from {thread}": (count - start.get((primitive, thread), 0.0)) / turns
        for (primitive, thread), count in end.items()
        if not any(name in thread for name in SCRAPE_THREADS)
    }
    per_turn = {k: v for k, v in sorted(per_turn.items(), key=lambda kv: -kv[1]) if v > 0}
    cpu_start, cpu_end = parse_cpu(before), parse_cpu(after)
    cpu_ms: dict[str, dict[str, float]] = {}
    for (thread, mode), seconds in cpu_end.items():
        if not any(name in thread for name in SCRAPE_THREADS):
            spent = (seconds - cpu_start.get((thread, mode), 0.0)) * 1000 / turns
            cpu_ms.setdefault(thread, {})[mode] = spent
    threads_cpu = {
        thread: ms for thread, ms in sorted(cpu_ms.items(), key=lambda kv: -kv[1].get("all", 0))
    }
    return {
        "turns": turns,
        "per_turn": sum(per_turn.values()),
        "breakdown": per_turn,
        "cpu_ms_per_turn_by_thread": threads_cpu,
    }


def summarise_turns(raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ready_s": raw["ready_s"],
        "first_warmup_turn_ms": raw["first_warmup_turn_ms"],
        "cpu_ms_per_turn": raw["cpu_ms_per_turn"],
        "commits_per_turn": raw["commits_per_turn"],
        "sides": turn_sides(raw["sides"], LABELS, DIRECT),
        "update_latency_ms": {
            name: {"median": median(values), "p99": percentile(values, 0.99), "n": len(values)}
            for name, values in raw["update_latency_ms"].items()
            if values
        },
    }
    durable = out["sides"].get(relay_sides.DURABLE)
    target: dict[str, Any] = {"vs": relay_sides.DURABLE, "max_ratio": TURN_TARGET_RATIO}
    if durable is None:
        target.update(ratio=None, met=None, why="no C compiler or no SQLite headers")
    else:
        ratio = out["sides"][SERVE]["median_ms"] / durable["median_ms"]
        target.update(ratio=ratio, met=ratio <= TURN_TARGET_RATIO)
    out["target"] = target
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="ms per '#chunks=N' turn through acpctl serve against the SDK client "
        "talking to the agent directly (interleaved), and acpctl batch tasks/s at several -j."
    )
    add_turn_arguments(parser, DEFAULT_TURNS, DEFAULT_WARMUP, DEFAULT_CHUNKS)
    parser.add_argument(
        "--tasks",
        type=positive_int,
        default=DEFAULT_TASKS,
        help=f"tasks per batch run (default {DEFAULT_TASKS})",
    )
    parser.add_argument(
        "--jobs",
        type=positive_int_list,
        default=list(DEFAULT_JOBS),
        help="comma-separated -j values for the batch runs (default 1,8,32)",
    )
    parser.add_argument("--skip-batch", action="store_true", help="measure only the turns")
    parser.add_argument(
        "--relays",
        action="store_true",
        help="also time the turn through relays with no store, each in front of an agent of "
        "its own (bench/relay.py: bytes on asyncio or on threads, frames parsed and written "
        "again; bench/relay.c: bytes, and durable first with SQLite, when a C compiler is "
        "present): what any process in the middle costs",
    )
    parser.add_argument(
        "--read-coalesce-ms",
        type=float,
        default=None,
        help="serve's [limits] read_coalesce_ms for the turns (default: the product's, 1; "
        "0 reads every write of the agent at once)",
    )
    parser.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more of serve's [limits] for the turns, e.g. record_interval_ms=0 (repeatable)",
    )
    parser.add_argument(
        "--real-agent",
        choices=("claude", "codex", "gemini"),
        default=None,
        help="start-to-ready with a real agent against the stand-in model server "
        "(needs `npm ci --prefix tests/real_agents`)",
    )
    parser.add_argument(
        "--ready-rounds",
        type=positive_int,
        default=DEFAULT_READY_ROUNDS,
        help=f"fresh starts per side for start-to-ready (default {DEFAULT_READY_ROUNDS})",
    )
    parser.add_argument(
        "--dir", default=None, help="where to create the temporary directory (default /tmp)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dir is not None and not os.path.isdir(args.dir):
        print(f"--dir {args.dir}: no such directory", file=sys.stderr)
        return 2
    for item in args.limit:
        key, sep, value = item.partition("=")
        try:
            EXTRA_LIMITS[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            print(f"--limit {item}: expected KEY=NUMBER", file=sys.stderr)
            return 2
    workdir = tempfile.mkdtemp(prefix="acp-serve-bench-", dir=args.dir)
    try:
        ready = asyncio.run(measure_ready(workdir, args.ready_rounds, args.real_agent))
        raw_turns = asyncio.run(
            measure_turns(
                workdir, args.turns, args.warmup, args.chunks, args.read_coalesce_ms, args.relays
            )
        )
        handoffs = asyncio.run(
            count_handoffs(workdir, HANDOFF_TURNS, args.warmup, args.chunks, args.read_coalesce_ms)
        )
        batch = (
            None if args.skip_batch else serve_batch.measure_batch(workdir, args.jobs, args.tasks)
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report: dict[str, Any] = {
        "config": {
            "turns": args.turns,
            "warmup": args.warmup,
            "chunks": args.chunks,
            "tasks": args.tasks,
            "jobs": args.jobs,
            "skip_batch": args.skip_batch,
            "relays": args.relays,
            "read_coalesce_ms": args.read_coalesce_ms,
            "limits": dict(EXTRA_LIMITS),
            "dir": workdir,
        },
        "machine": machine_info(),
        "ready": ready,
        "turns": summarise_turns(raw_turns),
        "handoffs": handoffs,
        "batch": batch,
        "peak_rss_mb": peak_rss_mb(),
    }
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
