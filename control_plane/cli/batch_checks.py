"""A batch's input checked before anything is opened or made: every task's agent
resolves, every task that gets a worktree is in a git repository."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from control_plane.batch.tasks import Task
    from control_plane.config import Config


def check_task_workspaces(
    tasks_file: Path, tasks: list[Task], default: str, base: str, default_cwd: str
) -> None:
    """Every task that gets a worktree has its cwd in a git repository where ``base``
    names a commit, before anything is opened or made (nothing is created otherwise)."""
    from actors.workspace import WorkspaceError, plan_worktree
    from control_plane.batch.tasks import TaskFileError

    problems = []
    checked: dict[str, str | None] = {}
    for task in tasks:
        if (task.workspace or default) != "worktree":
            continue
        cwd = task.cwd or default_cwd
        if cwd not in checked:
            try:
                plan_worktree(cwd, "check", os.devnull, base)
                checked[cwd] = None
            except WorkspaceError as exc:
                checked[cwd] = str(exc)
        if checked[cwd] is not None:
            problems.append(f"task {task.id!r}: {checked[cwd]}")
    if problems:
        raise TaskFileError(str(tasks_file), problems)


def check_task_agents(tasks_file: Path, tasks: list[Task], config: Config) -> None:
    """Every task's own ``agent`` resolves (a configured name or a usable command line)
    before the store is opened: a bad one stops the batch before any task runs."""
    from control_plane.agents import AgentCommandError
    from control_plane.batch.tasks import TaskFileError

    problems = []
    for task in tasks:
        if task.agent is None:
            continue
        try:
            config.agent(task.agent)
        except AgentCommandError as exc:
            problems.append(f"task {task.id!r}: {exc}")
    if problems:
        raise TaskFileError(str(tasks_file), problems)
