"""Crash-recoverable batch runs.

Every task is a durable spawn whose idempotency key is derived from the batch id and the task
id, so running the same command again after a crash (kill -9, power cut, Ctrl-C) finds the
tasks it already submitted: completed ones are not run again, interrupted ones are retried by
recovery within their attempt budget, queued ones simply run. ``retry_failed`` submits a new
generation (a new key) for each task whose last generation failed.

The results file is rebuilt from the store (the source of truth), atomically, while the batch
runs and at its end: one line per task, never a duplicate, whatever happened before.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from control_plane.api import ControlPlane
from control_plane.batch.tasks import Task
from protocol.atomic_file import write_text_atomically
from state_machines import CommandState, SessionState, StoreUnavailable, outcome_status
from store import AgentSpec, CommandRecord, SessionRecord
from store.usage import Budget, BudgetScope, BudgetStop, Usage


def default_batch_id(tasks_path: str | os.PathLike[str]) -> str:
    """Stable per task file location: rerunning the same file resumes the same batch."""
    resolved = str(Path(tasks_path).resolve())
    return f"{Path(resolved).stem}-{hashlib.sha256(resolved.encode()).hexdigest()[:10]}"


# The longest a finished task in a workspace waits for its turn's checkpoint to be logged.
CHECKPOINT_WAIT_S = 30.0


@dataclass
class TaskRun:
    task: Task
    session_id: str
    command_id: str
    generation: int


@dataclass
class Counts:
    done: int = 0
    failed: int = 0
    running: int = 0
    queued: int = 0

    @property
    def finished(self) -> int:
        return self.done + self.failed


@dataclass
class BatchOptions:
    batch_id: str
    agent: AgentSpec
    default_cwd: str
    results_path: Path
    transcripts_dir: Path | None = None
    retry_failed: bool = False
    agents: Callable[[str], tuple[AgentSpec, str | None]] | None = None  # per-task --agent
    extra_metadata: dict[str, Any] = field(default_factory=dict)
    queue_mode: str = "followup"
    # Give up (StoreUnavailable, exit 1) once the store has refused every write this long:
    # a full disk must not leave a batch hanging; the rerun finishes the work.
    store_fault_s: float = 60.0
    # All the batch's tasks together (tokens and/or cost their agents report): on reaching
    # it, "stop" cancels what runs and what is queued; "warn" reports it once.
    budget: Budget | None = None
    # "worktree" gives each task a git worktree (a task's own "workspace" wins); base ref and
    # the setup command a new worktree runs (a task's "setup" wins).
    workspace: str = "none"
    workspace_base: str = "HEAD"
    setup: str | None = None


class BatchRun:
    def __init__(self, cp: ControlPlane, tasks: list[Task], options: BatchOptions) -> None:
        self.cp = cp
        self.tasks = tasks
        self.options = options
        self.runs: list[TaskRun] = []
        self.resumed = 0  # tasks found from an earlier run of the same batch
        self.budget_reached: BudgetStop | None = None  # the batch budget, once reached
        self._checkpoints_seen: set[str] = set()
        self._workspace_rows: dict[str, dict[str, Any]] = {}

    def key(self, task: Task, generation: int) -> str:
        suffix = f":retry{generation}" if generation else ""
        return f"batch:{self.options.batch_id}:{task.id}{suffix}"

    def _latest(self, task: Task) -> tuple[int, SessionRecord | None]:
        generation, found = 0, None
        while True:
            session = self.cp.session_by_key(self.key(task, generation))
            if session is None:
                return (generation - 1 if found else 0), found
            found = session
            generation += 1

    def submit(self) -> None:
        """Spawn every task (idempotent by key: a task already in the store is found, not
        spawned again; one whose prompt, cwd or agent changed since is an
        ``IdempotencyConflict`` naming its key)."""
        # Agents known to speak HTTP MCP wait for the subagent tools at session/new (Claude
        # Code does): load the endpoint now, beside their start, not at their first connect.
        self.cp.expect_http_tools_for(self.options.agent.command)
        for task in self.tasks:
            generation, existing = self._latest(task)
            if existing is not None:
                command = self._first_command(existing.id)
                retry = (
                    self.options.retry_failed
                    and command is not None
                    and command.is_final
                    and command.state is not CommandState.COMPLETED
                )
                if not retry:
                    self.resumed += 1
                    # Returns the stored run.
                    self.runs.append(self._spawn(task, generation, existing.agent))
                    continue
                generation += 1
            self.runs.append(self._spawn(task, generation))

    def _first_command(self, session_id: str) -> CommandRecord | None:
        commands = self.cp.commands(session_id)
        return commands[0] if commands else None

    def _spawn(self, task: Task, generation: int, started_with: AgentSpec | None = None) -> TaskRun:
        agent, agent_cwd = self.options.agent, None
        if task.agent is not None and self.options.agents is not None:
            agent, agent_cwd = self.options.agents(task.agent)
        if started_with is not None and started_with.name == agent.name:
            # The same agent by name, as the task started with it: a name resolves to the
            # command found on this machine, which an install since (npx -> installed)
            # changes; the task keeps its command, not an IdempotencyConflict.
            agent = AgentSpec(started_with.name, started_with.command, env=agent.env)
        metadata: dict[str, Any] = {
            "batch": self.options.batch_id,
            "task": task.id,
            "generation": generation,
            **self.options.extra_metadata,
        }
        if task.timeout is not None:
            metadata["turnTimeoutS"] = task.timeout
        workspace = task.workspace or self.options.workspace
        suffix = f"-retry{generation}" if generation else ""
        result = self.cp.spawn(
            agent,
            task.cwd or agent_cwd or self.options.default_cwd,
            task.prompt,
            idempotency_key=self.key(task, generation),
            metadata=metadata,
            queue_mode=self.options.queue_mode,
            workspace=None if workspace == "none" else workspace,
            workspace_base=self.options.workspace_base,
            workspace_name=f"{self.options.batch_id}/{task.id}{suffix}",
            setup=task.setup or self.options.setup,
        )
        assert result.command is not None
        return TaskRun(task, result.session.id, result.command.id, generation)

    def _checkpointed(self, run: TaskRun) -> bool:
        """A finished task in a workspace counts as finished once its turn's checkpoint
        (taken just after the turn's end) is in the log, so the results name it."""
        if run.command_id in self._checkpoints_seen:
            return True
        session = self.cp.get(run.session_id)
        kinds = ("checkpoint", "turn_ended", "turn_failed", "closed")
        found = self.cp.events_of_kinds(run.session_id, kinds)
        seen = {(e.kind, e.command_id) for e in found}
        ended = [
            e
            for e in found
            if e.kind in ("turn_ended", "turn_failed") and e.command_id == run.command_id
        ]
        done = (
            "workspace" not in session.metadata
            or not ended
            or ("checkpoint", run.command_id) in seen
            or any(kind == "closed" for kind, _ in seen)
            # A process that died between the turn's end and its checkpoint takes it at
            # its next start: nothing here waits for that.
            or time.time() - ended[-1].created_at.timestamp() > CHECKPOINT_WAIT_S
        )
        if done:
            self._checkpoints_seen.add(run.command_id)
        return done

    def counts(self) -> Counts:
        counts = Counts()
        for run in self.runs:
            command = self.cp.command(run.command_id)
            if command.is_final and not self._checkpointed(run):
                counts.running += 1
            elif command.state is CommandState.COMPLETED:
                counts.done += 1
            elif command.is_final:
                counts.failed += 1
            elif command.state is CommandState.RUNNING:
                counts.running += 1
            else:
                counts.queued += 1
        return counts

    def enforce_budget(self) -> None:
        """Check the batch budget over every task's session (until it is reached once)."""
        budget = self.options.budget
        if budget is None or self.budget_reached is not None or not self.runs:
            return
        ids = [run.session_id for run in self.runs]
        reached, _ = self.cp.apply_budget(BudgetScope.BATCH, budget, ids)
        self.budget_reached = reached

    def usage(self) -> Usage:
        """What all the batch's tasks used together."""
        total = Usage()
        for run in self.runs:
            total = total + self.cp.usage(run.session_id)
        return total

    def close_finished(self, closed: set[str]) -> None:
        """Close the session of each finished task: its agent process ends now, not at
        passivation (a batch may hold thousands)."""
        for run in self.runs:
            if run.session_id in closed:
                continue
            if self.cp.command(run.command_id).is_final and self._checkpointed(run):
                if self.cp.get(run.session_id).state is not SessionState.CLOSED:
                    self.cp.close_session(run.session_id, "batch task finished")
                closed.add(run.session_id)

    def run(
        self, on_progress: Callable[[Counts], None] | None = None, poll_s: float = 0.2
    ) -> Counts:
        closed: set[str] = set()
        last_write = 0.0
        while True:
            fault = self.cp.store_fault(self.options.store_fault_s)
            if fault is not None and not isinstance(fault, StoreUnavailable):
                raise fault  # the store file is gone: its own message says what to do
            if fault is not None:
                raise StoreUnavailable(
                    f"the store has refused every write for {self.options.store_fault_s:g}s "
                    f"({fault}); nothing is lost: run the same command again once it takes "
                    "writes",
                    path=fault.path,
                )
            self.enforce_budget()
            counts = self.counts()
            if on_progress is not None:
                on_progress(counts)
            self.close_finished(closed)
            if time.monotonic() - last_write > 2.0:
                self.write_results()
                last_write = time.monotonic()
            if counts.finished == len(self.runs):
                break
            time.sleep(poll_s)
        self.write_results()
        if self.options.transcripts_dir is not None:
            self.export_transcripts(self.options.transcripts_dir)
        return counts

    def result_rows(self) -> list[dict[str, Any]]:
        rows = []
        for run in self.runs:
            command = self.cp.command(run.command_id)
            result = command.result or {}
            # A finished run in the vocabulary announce uses; queued or running as such.
            status = outcome_status(command.state, result) or command.state.value
            rows.append(
                {
                    "id": run.task.id,
                    "status": status,
                    "stopReason": result.get("stopReason"),
                    "text": result.get("text"),
                    "usage": result.get("usage"),
                    "error": command.error,
                    "attempts": command.attempts,
                    "generation": run.generation,
                    "sessionId": run.session_id,
                    "commandId": run.command_id,
                    **self._workspace_row(run, command.is_final),
                }
            )
        return rows

    def _workspace_row(self, run: TaskRun, final: bool) -> dict[str, Any]:
        """``{"workspace": {path, branch, checkpoint, diffstat}}`` for a task in a worktree
        (the diffstat from its base to its last checkpoint, read once it is final)."""
        if run.command_id in self._workspace_rows:
            return self._workspace_rows[run.command_id]
        from actors.workspace import WorkspaceError, diffstat, workspace_of

        spec = workspace_of(self.cp.get(run.session_id).metadata)
        if spec is None:
            return {}
        row: dict[str, Any] = {"path": spec.path, "branch": spec.branch, "checkpoint": None}
        checkpoints = self.cp.events_of_kinds(run.session_id, ("checkpoint",))
        done = [e.payload for e in checkpoints if "commit" in e.payload]
        if done:
            row["checkpoint"] = done[-1]["ref"]
            try:
                row["diffstat"] = diffstat(spec, spec.base, done[-1]["commit"])
            except WorkspaceError as exc:
                row["diffstat"] = f"unavailable: {exc}"
        result = {"workspace": row}
        if final and self._checkpointed(run):
            self._workspace_rows[run.command_id] = result
        return result

    def write_results(self) -> None:
        path = self.options.results_path
        path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in self.result_rows())
        write_text_atomically(path, text)

    def export_transcripts(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for run in self.runs:
            safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in run.task.id)
            self.cp.export_jsonl(run.session_id, directory / f"{safe}.jsonl")
