"""Making a session's worktree, idempotently, at its agent's start.

The spawn commits the session with its planned workspace (``spec.py``) before any file is
made: that row is the recorded intent. The session's start then makes what is missing, so
a crash at any point leaves nothing unaccounted: after the commit and before the worktree,
the next start makes it; in the middle of ``git worktree add`` (a directory with a ``.git``
link and part of the files), the next start removes that directory, prunes git's record of
it and adds it again; during the setup command, the next start runs the setup again (it
is done only once a marker is written in the worktree's own git directory, where the agent
does not look)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass

from actors.workspace.git import WorkspaceError, git
from actors.workspace.spec import WorkspaceSpec

READY_MARKER = "acpctl-ready"


@dataclass(frozen=True)
class WorktreeReady:
    created: bool  # made by this call (else it was there, set up)
    setup_exit: int | None = None  # the setup command's, when it ran
    setup_s: float | None = None


def ensure_worktree(spec: WorkspaceSpec, log_path: str, setup_timeout_s: float) -> WorktreeReady:
    """The worktree of ``spec`` exists and is set up; ``WorkspaceError`` otherwise (the
    setup's failure names its exit code and the end of its output)."""
    if _is_worktree(spec.path):
        if os.path.exists(os.path.join(git_dir(spec.path), READY_MARKER)):
            return WorktreeReady(created=False)
    else:
        _make(spec)
    exit_code, seconds = _setup(spec, log_path, setup_timeout_s)
    with open(os.path.join(git_dir(spec.path), READY_MARKER), "w") as marker:
        marker.write(f"{time.time():.3f}\n")
    return WorktreeReady(created=True, setup_exit=exit_code, setup_s=seconds)


def git_dir(path: str) -> str:
    """The worktree's own git directory (``<repo>/.git/worktrees/<name>``)."""
    return git(["rev-parse", "--absolute-git-dir"], path).strip()


def _is_worktree(path: str) -> bool:
    if not os.path.isfile(os.path.join(path, ".git")):
        return False
    try:
        top = git(["rev-parse", "--show-toplevel"], path).strip()
    except WorkspaceError:
        return False
    return os.path.realpath(top) == os.path.realpath(path)


def _make(spec: WorkspaceSpec) -> None:
    if os.path.exists(spec.path):
        leftover = os.listdir(spec.path)
        if leftover and ".git" not in leftover:
            raise WorkspaceError(
                f"{spec.path} exists and is not a worktree of {spec.repo}: move it away"
            )
        shutil.rmtree(spec.path)  # a creation a crash cut short
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
            f"workspace setup `{spec.setup}` failed with exit {done.returncode}: "
            f"{_tail(log_path)} (output: {log_path})"
        )
    return done.returncode, seconds


def remove_worktree(spec: WorkspaceSpec) -> None:
    """The worktree's directory and git's record of it; its branch and checkpoint refs
    stay (the work is in them)."""
    if os.path.exists(spec.path):
        git(["worktree", "remove", "--force", spec.path], spec.repo)
    git(["worktree", "prune"], spec.repo)


def _tail(path: str, limit: int = 300) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()[-limit:]
    except OSError:
        return ""
    return data.decode("utf-8", "replace").strip().replace("\n", " | ")
