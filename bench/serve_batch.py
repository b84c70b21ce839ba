"""``acpctl batch`` tasks/s at several ``-j`` (``bench/serve_overhead.py``'s part (b)): each
run a subprocess on a fresh store in its own temporary directory, timed as the wall time of
the whole command (interpreter start, store creation, every task, results file), with the CPU
of the command and all its descendants."""

from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from bench._common import acpctl_argv, child_env, example_agent_argv, now, progress

BATCH_CHUNKS = 5
BATCH_TIMEOUT_S = 1800.0


@dataclass
class BatchRun:
    jobs: int
    tasks: int
    seconds: float
    cpu_s: float
    ok: int

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds if self.seconds > 0 else float("nan")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_batch(parent: str, jobs: int, tasks: int, chunks: int) -> BatchRun:
    """One ``acpctl batch`` subprocess on a fresh store in a fresh directory."""
    workdir = tempfile.mkdtemp(prefix=f"batch-j{jobs}-", dir=parent)
    try:
        tasks_path = os.path.join(workdir, "tasks.jsonl")
        with open(tasks_path, "w", encoding="utf-8") as fh:
            for i in range(tasks):
                fh.write(json.dumps({"id": f"t{i:04d}", "prompt": f"#chunks={chunks} task {i}"}))
                fh.write("\n")
        results = os.path.join(workdir, "results.jsonl")
        agent = shlex.join(example_agent_argv(os.path.join(workdir, "agent-state.json")))
        argv = acpctl_argv(
            os.path.join(workdir, "cp.db"),
            "batch",
            tasks_path,
            "--agent",
            agent,
            "-j",
            str(jobs),
            "--out",
            results,
            "--json",
        )
        env = child_env(workdir)
        cpu_before = _children_cpu()
        with open(os.path.join(workdir, "batch.stderr.log"), "wb") as log:
            start = now()
            done = subprocess.run(
                argv,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                timeout=BATCH_TIMEOUT_S,
                check=False,
            )
            elapsed = now() - start
        cpu = _children_cpu() - cpu_before
        if done.returncode != 0:
            with open(os.path.join(workdir, "batch.stderr.log"), encoding="utf-8") as fh:
                tail = fh.read()[-2000:]
            raise RuntimeError(f"acpctl batch -j {jobs} exited {done.returncode}:\n{tail}")
        with open(results, encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        ok = sum(1 for row in rows if row.get("status") == "ok")
        if len(rows) != tasks or ok != tasks:
            raise RuntimeError(f"acpctl batch -j {jobs}: {ok} ok of {len(rows)} rows, {tasks}")
        return BatchRun(jobs=jobs, tasks=tasks, seconds=elapsed, cpu_s=cpu, ok=ok)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def cli_start_s(parent: str) -> float:
    """Wall time of ``acpctl --help`` (interpreter + CLI imports), the fixed cost of a run."""
    env = child_env(parent)
    start = now()
    subprocess.run(
        [sys.executable, "-m", "control_plane.cli", "--help"],
        cwd=parent,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
        timeout=120,
    )
    return now() - start


def measure_batch(parent: str, jobs: list[int], tasks: int) -> dict[str, Any]:
    runs: list[BatchRun] = []
    cli = cli_start_s(parent)
    for j in jobs:
        progress(f"acpctl batch: {tasks} tasks of '#chunks={BATCH_CHUNKS}' at -j {j}")
        run = run_batch(parent, j, tasks, BATCH_CHUNKS)
        progress(
            f"  -j {j}: {run.seconds:.1f} s, {run.rate:.2f} tasks/s, "
            f"{run.cpu_s / run.tasks:.2f} CPU s/task"
        )
        runs.append(run)
    return {
        "chunks_per_task": BATCH_CHUNKS,
        "tasks": tasks,
        "cli_start_s": cli,
        "runs": [
            {
                "jobs": r.jobs,
                "tasks": r.tasks,
                "seconds": r.seconds,
                "tasks_per_s": r.rate,
                "cpu_s": r.cpu_s,
                "cpu_s_per_task": r.cpu_s / r.tasks,
                "ok": r.ok,
            }
            for r in runs
        ],
    }


def print_batch(batch: dict[str, Any]) -> None:
    """The batch part of the report (``measure_batch``'s result)."""
    print()
    print(
        f"acpctl batch: {batch['tasks']} tasks of '#chunks={batch['chunks_per_task']}', "
        f"example agent, fresh store per run; wall time of the whole command"
    )
    header = f"{'':<10}{'seconds':>10}{'tasks/s':>10}{'CPU s/task':>12}{'vs -j first':>13}"
    print(header)
    print("-" * len(header))
    base = batch["runs"][0]["tasks_per_s"] if batch["runs"] else float("nan")
    for run in batch["runs"]:
        label = f"-j {run['jobs']}"
        print(
            f"{label:<10}{run['seconds']:>10.2f}{run['tasks_per_s']:>10.2f}"
            f"{run['cpu_s_per_task']:>12.2f}{run['tasks_per_s'] / base:>12.2f}x"
        )
    print()
    print(
        f"tasks share agent processes (acpctl batch's --sessions-per-agent); CPU s/task "
        f"counts the command and all its descendants. `acpctl --help` alone takes "
        f"{batch['cli_start_s']:.2f} s."
    )
