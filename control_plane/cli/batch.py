"""``acpctl batch`` and ``acpctl demo`` (the main job)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from control_plane.cli.batch_checks import check_task_agents, check_task_workspaces
from control_plane.cli.batch_progress import next_run_after_interrupt, run_with_progress
from control_plane.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    Context,
    err,
    errors_as_exit,
    existing_file,
    opened,
    out,
    print_json,
)
from control_plane.cli.nodes import LabelOption, NodeNameOption, with_node

if TYPE_CHECKING:  # the batch runner pulls in the whole runtime: imported when a batch runs
    from control_plane.api import ControlPlane
    from control_plane.batch.run import Counts
    from control_plane.config import Config


@contextmanager
def serving_metrics(
    cp: ControlPlane, address: tuple[str, int] | None, quiet: bool
) -> Iterator[None]:
    """``/metrics`` while the block runs (nothing without ``--metrics``)."""
    if address is None:
        yield
        return
    from control_plane.metrics import MetricsServer

    server = MetricsServer(cp, *address)
    if not quiet:
        host, port = server.address
        err.print(f"metrics at http://{host}:{port}/metrics", highlight=False)
    try:
        yield
    finally:
        server.close()


# A batch's tasks are independent prompts to one agent, each in a session that ends with its
# turn: they share agent processes (each start costs 1-2 s of CPU and 110-335 MB for a real
# agent), a few sessions per process. A task whose shared agent dies fails on its own and is
# run again by ``--retry-failed``. Interactive sessions keep a process each (config
# ``limits.sessions_per_agent``), where one session's crash must not end another's turn.
BATCH_SESSIONS_PER_AGENT = 8
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


class Workspace(StrEnum):
    WORKTREE = "worktree"
    NONE = "none"


class Interrupted(StrEnum):
    CONTINUE = "continue"
    REPORT = "report"


def _sessions_per_agent(flag: int | None, config: Config) -> int:
    """The flag, else the configuration when it sets it, else the batch default."""
    if flag is not None:
        return flag
    if "sessions_per_agent" in config.limits.model_fields_set:
        return config.limits.sessions_per_agent
    return BATCH_SESSIONS_PER_AGENT


def run_batch(
    ctx: Context,
    tasks_file: Path,
    agent: str | None,
    jobs: int,
    out_path: Path | None,
    transcripts: Path | None,
    retry_failed: bool,
    batch_id: str | None,
    json_out: bool,
    budget_tokens: int | None = None,
    budget_cost: float | None = None,
    metrics: str | None = None,
    sessions_per_agent: int | None = None,
    interrupted: Interrupted | None = None,
    workspace: Workspace | None = None,
    base: str = "HEAD",
) -> int:
    from control_plane.batch.tasks import read_tasks
    from control_plane.metrics import parse_address
    from control_plane.prestart import prestart_agent
    from protocol.agent.prestart import PrestartPool
    from store.usage import Budget

    metrics_at = None if metrics is None else parse_address(metrics)  # bad input: exit 2

    tasks_file = existing_file(tasks_file)
    tasks = read_tasks(tasks_file)  # every invalid line reported before anything runs
    config = ctx.config()
    policy = interrupted.value if interrupted is not None else config.interrupted_turns
    spec, agent_cwd = config.agent(agent)
    check_task_agents(tasks_file, tasks, config)
    default_cwd = agent_cwd or os.getcwd()
    chosen = workspace.value if workspace is not None else config.defaults.workspace
    check_task_workspaces(tasks_file, tasks, chosen, base, default_cwd)
    # The input is good: the first task's agent starts now, before the runner is imported
    # (the SDK's schema alone is ~0.8 s of CPU), so the agent's own start-up (its imports,
    # as long again) runs while the runtime loads and the store opens; the first session
    # that fits takes it (with shared processes, the first process started).
    prestarted = PrestartPool()
    if tasks:
        first = tasks[0]
        first_spec, first_cwd = config.agent(first.agent) if first.agent else (spec, agent_cwd)
        prestarted = prestart_agent(
            config, first_spec, first.cwd or first_cwd or default_cwd, "batch"
        )
    # The runner (the SDK, the store, the actors) only once the input is known to be good.
    from control_plane.batch.run import BatchOptions, BatchRun, default_batch_id

    results = out_path or tasks_file.with_name(f"{tasks_file.stem}.results.jsonl")
    options = BatchOptions(
        batch_id=batch_id or default_batch_id(tasks_file),
        agent=spec,
        default_cwd=default_cwd,
        results_path=results.resolve(),
        transcripts_dir=None if transcripts is None else transcripts.resolve(),
        retry_failed=retry_failed,
        agents=config.agent,
        queue_mode=config.queue_mode.value,
        store_fault_s=config.timeouts.store_fault_s,
        workspace=(workspace.value if workspace is not None else config.defaults.workspace),
        workspace_base=base,
        setup=config.workspace.setup,
        budget=(
            Budget(budget_tokens, budget_cost)
            if budget_tokens is not None or budget_cost is not None
            else None
            if config.budgets.batch is None
            else config.budgets.batch.budget()
        ),
    )
    with (
        contextlib.closing(prestarted),
        opened(
            ctx,
            run_sessions=True,
            max_running_turns=jobs,
            sessions_per_agent=_sessions_per_agent(sessions_per_agent, config),
            prestarted=prestarted,
            interrupted_turns=policy,
        ) as cp,
        serving_metrics(cp, metrics_at, quiet=json_out),
    ):
        batch = BatchRun(cp, tasks, options)
        batch.submit()
        total = len(batch.runs)
        if batch.resumed and not json_out:
            err.print(
                f"resuming batch {options.batch_id}: "
                f"{batch.resumed} of {total} tasks already submitted"
            )
        cut_off: Counts | None = None
        try:
            counts = run_with_progress(batch, total, json_out)
        except KeyboardInterrupt:
            # Read while the store is open; said once the actors have stopped (each turn
            # cut off is spared its attempt on the way: ops.spare_attempts).
            cut_off = batch.counts()
        else:
            rows = batch.result_rows()
            usage = batch.usage()
            reached = batch.budget_reached
    if cut_off is not None:
        err.print(next_run_after_interrupt(cut_off, total, policy), highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED)
    if json_out:
        print_json(
            {
                "batch": options.batch_id,
                "results": str(options.results_path),
                "tasks": rows,
                "usage": usage.to_json(),
                "budgetReached": None if reached is None else reached.to_json(),
            }
        )
    else:
        table = Table("task", "status", "attempts", "stop reason / error")
        for row in rows:
            detail = row["error"] or row["stopReason"] or ""
            table.add_row(row["id"], row["status"], str(row["attempts"]), str(detail)[:80])
        out.print(table)
        out.print(f"{counts.done} done, {counts.failed} failed of {total}")
        out.print(
            f"usage: {usage.total_tokens} tokens ({usage.input_tokens} in, "
            f"{usage.output_tokens} out), ${usage.cost_usd:.4f}"
        )
        if reached is not None:
            verb = (
                "stopped the batch"
                if options.budget and options.budget.action == "stop"
                else "reached"
            )
            out.print(
                f"budget {reached.budget} {verb}: {reached.used:g} used of {reached.limit:g}",
                highlight=False,
            )
        out.print(f"results: {options.results_path}")
        if options.transcripts_dir is not None:
            out.print(f"transcripts: {options.transcripts_dir}")
    return EXIT_FAILED if counts.failed else EXIT_OK


def batch_command(
    typer_ctx: typer.Context,
    tasks_file: Annotated[
        Path, typer.Argument(help="JSONL: one {id, prompt, cwd?, agent?, timeout?} per line.")
    ],
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            help="Agent name (claude, codex, gemini, example, any configured or registry "
            "name; `acpctl agents list`) or a command line.",
        ),
    ] = None,
    jobs: Annotated[
        int, typer.Option("-j", "--jobs", min=1, max=1024, help="Tasks running at once.")
    ] = 4,
    out_path: Annotated[
        Path | None, typer.Option("--out", help="Results JSONL (default: TASKS.results.jsonl).")
    ] = None,
    transcripts: Annotated[
        Path | None,
        typer.Option("--transcripts", help="Export each task's transcript (JSONL v3) here."),
    ] = None,
    retry_failed: Annotated[
        bool, typer.Option("--retry-failed", help="Run failed tasks again (only those).")
    ] = False,
    batch_id: Annotated[
        str | None, typer.Option("--batch-id", help="Default: derived from the tasks file's path.")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the results as one JSON document.")
    ] = False,
    budget_tokens: Annotated[
        int | None,
        typer.Option("--budget-tokens", min=1, help="Stop the batch at this many tokens."),
    ] = None,
    budget_cost: Annotated[
        float | None,
        typer.Option("--budget-cost", min=0.0, help="Stop the batch at this cost (USD)."),
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option("--metrics", help="Serve Prometheus metrics at HOST:PORT/metrics."),
    ] = None,
    workspace: Annotated[
        Workspace | None,
        typer.Option(
            "--workspace",
            help="worktree: each task's agent works in its own git worktree of its cwd's "
            "repository, checkpointed at every turn end (docs/workspaces.md); default: "
            "[defaults] workspace, else none.",
        ),
    ] = None,
    base: Annotated[
        str, typer.Option("--base", help="The ref new worktrees start at.", metavar="REF")
    ] = "HEAD",
    interrupted: Annotated[
        Interrupted | None,
        typer.Option(
            "--interrupted",
            help="A task a crash or Ctrl-C cut off mid-turn, whose agent kept the "
            "conversation: continue it with the continuation prompt, or report it "
            "interrupted (default: interrupted_turns in the config, else continue).",
        ),
    ] = None,
    sessions_per_agent: Annotated[
        int | None,
        typer.Option(
            "--sessions-per-agent",
            min=1,
            max=1024,
            help=f"Tasks one agent process may run at once (default {BATCH_SESSIONS_PER_AGENT}"
            ", or limits.sessions_per_agent when configured; 1: a process per task).",
        ),
    ] = None,
    node_name: NodeNameOption = None,
    label: LabelOption = None,
) -> None:
    """Run many prompts durably. Kill it at any moment and run the same command again: it
    resumes, never runs a completed task twice, and the results file lists every task once.

    Example: acpctl batch tasks.jsonl --agent claude -j 8
    """
    ctx = with_node(typer_ctx.obj, node_name, label)  # a bad name or label: exit 2, no run
    with errors_as_exit():
        code = run_batch(
            ctx,
            tasks_file,
            agent,
            jobs,
            out_path,
            transcripts,
            retry_failed,
            batch_id,
            json_out,
            budget_tokens,
            budget_cost,
            metrics,
            sessions_per_agent,
            interrupted,
            workspace,
            base,
        )
    raise typer.Exit(code)


def demo_command(
    typer_ctx: typer.Context,
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the demo keeps its store and outputs.")
    ] = Path("acpctl-demo"),
    jobs: Annotated[int, typer.Option("-j", "--jobs", min=1, max=64)] = 4,
) -> None:
    """The main job: a batch of example tasks against the bundled example agent, on an
    embedded SQLite store, with progress; then where the results and transcripts are.

    Run it twice: the second run finds every task done and runs nothing again.
    """
    ctx: Context = typer_ctx.obj
    directory = directory.resolve()
    workspace = directory / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    readme = workspace / "README.txt"
    if not readme.exists():
        readme.write_text(
            "This workspace belongs to the acpctl demo.\nAgents read and write here.\n"
        )
    tasks = directory / "tasks.jsonl"
    if not tasks.exists():
        with resources.as_file(
            resources.files("control_plane") / "examples" / "tasks.jsonl"
        ) as src:
            shutil.copyfile(src, tasks)
    if ctx.db is None:
        ctx.db = str(directory / "acpctl.db")
    os.chdir(workspace)  # tasks without a cwd run in the demo workspace
    with errors_as_exit():
        code = run_batch(
            ctx,
            tasks,
            "example",
            jobs,
            directory / "results.jsonl",
            directory / "transcripts",
            False,
            "demo",
            False,
        )
    out.print(f"store: {ctx.db}")
    out.print(f"inspect: acpctl --db {ctx.db} sessions list")
    raise typer.Exit(code)
