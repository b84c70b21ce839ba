"""``acpctl batch`` beside ``acpx exec`` under ``xargs -P``: wall time and agent starts.

What is measured
----------------
The same ``--tasks`` prompts (default 8, ``#chunks=20 task i``: a 20-chunk reply of the
bundled example agent) run two ways, at each ``-j`` of ``--jobs`` (default 1 and 4):

* *acpctl*: ``acpctl batch TASKS.jsonl --agent <example agent> -j J`` on a fresh store in a
  fresh directory: durable (every task a command in a WAL SQLite store, ``synchronous=FULL``;
  kill it and rerun, nothing runs twice), with its default agent sharing (a batch's tasks
  share agent processes, ``--sessions-per-agent``, default 8).
* *acpx*: ``xargs -P J`` running one ``acpx --agent <example agent> --approve-all
  --format quiet exec PROMPT`` per task (npm ``acpx`` 0.19.1, pinned in bench/node; no
  durability: each exec is one agent process and one session). ``-P 1`` is a plain loop.

Both sides run the same agent command, whose ``--invocations-file`` logs every prompt with
the pid of the process that ran it: the agent processes counted are the distinct pids, the
same count for both sides. Rounds alternate which side goes first. Reported: median wall
time per side and ``-j``, the ratio (acpx / acpctl: how many times faster acpctl is), agent
processes per side. The issue's target: at least 3x faster at ``-j 4`` and at least 3x fewer
agent starts than tasks.

Needs Node and ``npm install --prefix bench/node`` for the acpx side (the pinned lockfile;
``npm ci`` refuses it: npm 11 reports the optional platform packages of a dependency missing
from it); without it only the acpctl side runs (and says so). Run from the repository
root::

    python -m bench.batch_vs_acpx                  # 3 rounds, -j 1 and 4: about 2 minutes
    python -m bench.batch_vs_acpx --rounds 5 --jobs 4,8 --tasks 16
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from bench._common import (
    REPO_ROOT,
    child_env,
    machine_info,
    median,
    now,
    positive_int,
    positive_int_list,
    progress,
)

ACPX = os.path.join(REPO_ROOT, "bench", "node", "node_modules", ".bin", "acpx")
ACPCTL, XARGS = "acpctl batch", "xargs + acpx exec"


def agent_argv(workdir: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "protocol.example_agent",
        "--state-file",
        os.path.join(workdir, "agent-state.json"),
        "--invocations-file",
        os.path.join(workdir, "invocations.jsonl"),
    ]


def prompts(tasks: int) -> list[str]:
    return [f"#chunks=20 task {i}" for i in range(tasks)]


def invocations(workdir: str) -> tuple[int, int]:
    """(prompts the agent ran, distinct agent processes that ran them)."""
    path = os.path.join(workdir, "invocations.jsonl")
    if not os.path.exists(path):
        return 0, 0
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return len(rows), len({row["pid"] for row in rows})


def run_acpctl(parent: str, tasks: int, jobs: int) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="acpctl-", dir=parent)
    tasks_file = os.path.join(workdir, "tasks.jsonl")
    with open(tasks_file, "w", encoding="utf-8") as f:
        for i, prompt in enumerate(prompts(tasks)):
            f.write(json.dumps({"id": f"t{i}", "prompt": prompt, "cwd": workdir}) + "\n")
    argv = [
        sys.executable,
        "-m",
        "control_plane.cli",
        "--db",
        os.path.join(workdir, "batch.db"),
        "batch",
        tasks_file,
        "--agent",
        shlex.join(agent_argv(workdir)),
        "-j",
        str(jobs),
        "--json",
    ]
    return timed(ACPCTL, argv, None, child_env(workdir), workdir, tasks)


def run_acpx(parent: str, tasks: int, jobs: int) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="acpx-", dir=parent)
    agent = shlex.join(agent_argv(workdir))
    script = (
        f"exec {shlex.quote(ACPX)} --agent {shlex.quote(agent)} --cwd "
        + shlex.quote(workdir)
        + ' --approve-all --format quiet exec "$0" >/dev/null'
    )
    argv = ["xargs", "-d", "\n", "-P", str(jobs), "-n", "1", "sh", "-c", script]
    env = child_env(workdir)
    env["HOME"] = workdir  # acpx keeps its session files under $HOME: one fresh per run
    return timed(XARGS, argv, "\n".join(prompts(tasks)), env, workdir, tasks)


def timed(
    side: str, argv: list[str], stdin: str | None, env: dict[str, str], workdir: str, tasks: int
) -> dict[str, Any]:
    """Run one side's command; its wall time and the agent processes that ran its prompts
    (checking that every prompt ran exactly once)."""
    start = now()
    done = subprocess.run(argv, input=stdin, env=env, capture_output=True, text=True)
    wall = now() - start
    if done.returncode != 0:
        raise RuntimeError(f"{side} exited {done.returncode}: {done.stderr[-2000:]}")
    ran, agents = invocations(workdir)
    if ran != tasks:
        raise RuntimeError(f"{side}: the agent ran {ran} prompts, not {tasks}")
    return {"wall_s": wall, "agents": agents}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="acpctl batch beside xargs + acpx exec: wall time and agent processes."
    )
    parser.add_argument("--tasks", type=positive_int, default=8)
    parser.add_argument("--jobs", type=positive_int_list, default=[1, 4])
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--dir", default=None, help="parent of the temporary directory")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    have_acpx = os.path.exists(ACPX) and shutil.which("node") is not None
    if not have_acpx:
        print(
            "acpx side skipped: needs Node.js and `npm install --prefix bench/node`",
            file=sys.stderr,
        )
    parent = tempfile.mkdtemp(prefix="acp-batch-bench-", dir=args.dir)
    results: dict[int, dict[str, list[dict[str, Any]]]] = {
        j: {ACPCTL: [], XARGS: []} for j in args.jobs
    }
    try:
        for r in range(args.rounds):
            for jobs in args.jobs:
                sides = [ACPCTL, XARGS] if have_acpx else [ACPCTL]
                if r % 2:
                    sides.reverse()
                for side in sides:
                    run = run_acpctl if side == ACPCTL else run_acpx
                    got = run(parent, args.tasks, jobs)
                    results[jobs][side].append(got)
                    progress(
                        f"round {r + 1}/{args.rounds} -j {jobs} {side}: "
                        f"{got['wall_s']:.2f} s, {got['agents']} agents"
                    )
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    report: dict[str, Any] = {"machine": machine_info(), "tasks": args.tasks, "jobs": {}}
    for jobs, by_side in results.items():
        row: dict[str, Any] = {}
        for side, runs in by_side.items():
            if runs:
                row[side] = {
                    "wall_s": median([x["wall_s"] for x in runs]),
                    "agents": median([x["agents"] for x in runs]),
                }
        if XARGS in row:
            row["acpx_over_acpctl"] = row[XARGS]["wall_s"] / row[ACPCTL]["wall_s"]
        report["jobs"][str(jobs)] = row
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    m = report["machine"]
    print(
        f"batch of {args.tasks} tasks ('#chunks=20 task i', example agent), "
        f"{args.rounds} rounds, medians"
    )
    print(f"Python {m['python']}, {m['cpus']} CPUs, {m['platform']}")
    print(
        f"{'-j':>4} {'acpctl s':>9} {'agents':>7} {'acpx s':>8} {'agents':>7} {'acpx/acpctl':>12}"
    )
    for jobs, row in report["jobs"].items():
        a = row[ACPCTL]
        x = row.get(XARGS)
        xs = (
            f"{x['wall_s']:8.2f} {x['agents']:7.0f} {row['acpx_over_acpctl']:11.2f}x"
            if x
            else "  (acpx not installed)"
        )
        print(f"{jobs:>4} {a['wall_s']:9.2f} {a['agents']:7.0f} {xs}")
    print("target: acpctl >= 3x faster at -j 4, and >= 3x fewer agent processes than tasks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
