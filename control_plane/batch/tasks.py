"""Batch task files: one JSON object per line, validated before anything runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from state_machines import ControlPlaneError


class TaskFileError(ControlPlaneError):
    """The task file is missing or has invalid lines (every problem, with line numbers)."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: " + "; ".join(problems))


class Task(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=200)
    prompt: str = Field(min_length=1)
    cwd: str | None = None
    agent: str | None = None
    timeout: float | None = Field(None, gt=0)
    # "worktree": the task's agent works in a git worktree of its cwd's repository
    # (docs/workspaces.md); "none": in cwd itself. Unset: --workspace, else the config.
    workspace: Literal["worktree", "none"] | None = None
    setup: str | None = Field(None, min_length=1)  # run in a new worktree first

    @field_validator("id")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.strip() or any(ch in value for ch in "\n\r\t"):
            raise ValueError("must be a non-blank single-line string")
        return value


def read_tasks(path: str | os.PathLike[str]) -> list[Task]:
    """Parse and validate every line; ``TaskFileError`` lists all problems at once."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TaskFileError(str(source), ["file does not exist"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFileError(str(source), [f"cannot read: {exc}"]) from None
    tasks: list[Task] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    base = source.resolve().parent
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"line {number}: not valid JSON ({exc.msg})")
            continue
        if not isinstance(data, dict):
            problems.append(f"line {number}: expected a JSON object")
            continue
        try:
            task = Task.model_validate(data)
        except ValidationError as exc:
            detail = ", ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'task'}: {err['msg']}"
                for err in exc.errors()
            )
            problems.append(f"line {number}: {detail}")
            continue
        if task.id in seen:
            problems.append(
                f"line {number}: duplicate task id {task.id!r} (first on line {seen[task.id]})"
            )
            continue
        seen[task.id] = number
        if task.cwd is not None:
            cwd = Path(os.path.expanduser(task.cwd))
            cwd = cwd if cwd.is_absolute() else base / cwd
            if not cwd.is_dir():
                problems.append(f"line {number}: cwd {task.cwd!r} is not a directory")
                continue
            task = task.model_copy(update={"cwd": str(cwd)})
        tasks.append(task)
    if problems:
        raise TaskFileError(str(source), problems)
    if not tasks:
        raise TaskFileError(str(source), ["no tasks in the file"])
    return tasks
