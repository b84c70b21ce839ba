"""Workspaces: a git worktree per session, created by the session's first start, set up,
checkpointed at every turn end into hidden refs, restored before a turn a crash cut off is
run again. ``docs/workspaces.md`` says what each step does and why."""

from actors.workspace.checkpoint import (
    Checkpoint,
    changed_since,
    diff,
    diffstat,
    restore,
    take_checkpoint,
)
from actors.workspace.git import WorkspaceError
from actors.workspace.spec import WorkspaceSpec, plan_worktree, workspace_of
from actors.workspace.worktree import ensure_worktree, remove_worktree

__all__ = [
    "Checkpoint",
    "WorkspaceError",
    "WorkspaceSpec",
    "changed_since",
    "diff",
    "diffstat",
    "ensure_worktree",
    "plan_worktree",
    "remove_worktree",
    "restore",
    "take_checkpoint",
    "workspace_of",
]
