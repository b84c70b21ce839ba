"""Making a session's worktree, idempotently, at its agent's start.

The spawn commits the session with its planned workspace (``spec.py``) before any file is
made: that row is the recorded intent. The session's start then makes what is missing, so
a crash at any point leaves nothing unaccounted: after the commit and before the worktree,
the next start makes it; in the middle of ``git worktree add`` or of the setup command,
the next start removes the worktree (``git worktree remove --force``: no agent ever ran
there) and makes it again. A worktree is ready once a marker is written in its own git
directory (where the agent does not look), after its setup; nothing else is ever removed:
a directory at the path that is not a worktree of the repository is an error."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass

from actors.workspace.git import WorkspaceError, git, worktree_admin_lock
from actors.workspace.spec import WorkspaceSpec

READY_MARKER = "acpctl-ready"


@dataclass(frozen=True)
class WorktreeReady:
    made: bool  # the worktree was added (and set up) by this call; else it was ready
    setup_exit: int | None = None  # the setup command's, when it ran
    setup_s: float | None = None


def ensure_worktree(spec: WorkspaceSpec, log_path: str, setup_timeout_s: float) -> WorktreeReady:
    """The worktree of ``spec`` exists and is set up; ``WorkspaceError`` otherwise (a
    failed setup names its exit code and its log, never its output: it may print secrets)."""
    try:
        return _ensure(spec, log_path, setup_timeout_s)
    except OSError as exc:
        raise WorkspaceError(f"workspace {spec.path}: {exc}") from exc


def _ensure(spec: WorkspaceSpec, log_path: str, setup_timeout_s: float) -> WorktreeReady:
    admin = _admin_dir(spec)
    if admin is not None and os.path.exists(os.path.join(admin, READY_MARKER)):
        return WorktreeReady(made=False)
    with worktree_admin_lock(spec.repo):  # not the setup: it may run for minutes
        if admin is not None:
            # Added, but never set up to the end (its agent never ran there): a creation or
            # a setup a crash cut short, made again from the start.
            git(["worktree", "remove", "--force", spec.path], spec.repo)
        elif os.path.exists(spec.path):
            if os.listdir(spec.path):
                raise WorkspaceError(
                    f"{spec.path} exists and is not a worktree of {spec.repo}: move it away"
                )
            os.rmdir(spec.path)
        _add(spec)
    exit_code, seconds = _setup(spec, log_path, setup_timeout_s)
    with open(os.path.join(git_dir(spec.path), READY_MARKER), "w") as marker:
        marker.write(f"{time.time():.3f}\n")
    return WorktreeReady(made=True, setup_exit=exit_code, setup_s=seconds)


def git_dir(path: str) -> str:
    """The worktree's own git directory (``<repo>/.git/worktrees/<name>``)."""
    return git(["rev-parse", "--absolute-git-dir"], path).strip()


def _admin_dir(spec: WorkspaceSpec) -> str | None:
    """The git directory the path's ``.git`` link names, when it is one of ``spec.repo``'s
    worktrees (read from the files, not asked of git: a git that refuses to run there, say
    for the directory's owner, must not make the worktree look like debris)."""
    link = os.path.join(spec.path, ".git")
    if not os.path.isfile(link):
        return None
    with open(link) as f:
        first = f.readline().strip()
    if not first.startswith("gitdir:"):
        return None
    target = os.path.realpath(os.path.join(spec.path, first[len("gitdir:") :].strip()))
    common = git(["rev-parse", "--git-common-dir"], spec.repo).strip()
    worktrees = os.path.realpath(os.path.join(spec.repo, common, "worktrees"))
    if os.path.dirname(target) != worktrees:
        raise WorkspaceError(f"{spec.path} is a worktree of another repository than {spec.repo}")
    return target if os.path.isdir(target) else None


def _add(spec: WorkspaceSpec) -> None:
    git(["worktree", "prune"], spec.repo)  # forget a worktree whose directory is gone
    os.makedirs(os.path.dirname(spec.path), exist_ok=True)
    branch_exists = bool(
        git(["branch", "--list", spec.branch], spec.repo).strip()
    )  # a branch kept from an earlier life of this worktree keeps its commits
    if branch_exists:
        git(["worktree", "add", spec.path, spec.branch], spec.repo)
    else:
        git(["worktree", "add", "-b", spec.branch, spec.path, spec.base], spec.repo)


def _setup(spec: WorkspaceSpec, log_path: str, timeout_s: float) -> tuple[int | None, float | None]:
    if not spec.setup:
        return None, None
    os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    started = time.monotonic()
    with open(log_path, "ab") as log:
        log.write(f"$ {spec.setup}\n".encode())
        log.flush()
        try:
            done = subprocess.run(
                spec.setup,
                shell=True,
                cwd=spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise WorkspaceError(
                f"workspace setup `{spec.setup}` took over {timeout_s:g} s (output: {log_path})"
            ) from None
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise WorkspaceError(
            f"workspace setup `{spec.setup}` failed with exit {done.returncode} "
            f"(its output: {log_path})"
        )
    return done.returncode, seconds


def remove_worktree(spec: WorkspaceSpec) -> None:
    """The worktree's directory and git's record of it; its branch and checkpoint refs
    stay (the work is in them)."""
    with worktree_admin_lock(spec.repo):
        if os.path.exists(spec.path):
            git(["worktree", "remove", "--force", spec.path], spec.repo)
        git(["worktree", "prune"], spec.repo)
