"""Running git: one subprocess per command, its stderr in the error when it fails."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence

from state_machines import ControlPlaneError

# git's own environment variables that would point a command at another repository or
# index than the one named by -C (a hook or an outer git process may have set them).
_GIT_LOCATION_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_PREFIX")


class WorkspaceError(ControlPlaneError):
    """A workspace that cannot be made, set up, checkpointed or restored: the reason (git's
    or the setup command's own words) and the path."""


def git(
    args: Sequence[str],
    cwd: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> str:
    """``git -C cwd ARGS``'s stdout; ``WorkspaceError`` with its stderr when it fails."""
    environment = {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARIABLES}
    # Checkpoints are the control plane's commits: a fixed identity, no user config needed.
    environment.update(
        {
            "GIT_AUTHOR_NAME": "acpctl",
            "GIT_AUTHOR_EMAIL": "acpctl@localhost",
            "GIT_COMMITTER_NAME": "acpctl",
            "GIT_COMMITTER_EMAIL": "acpctl@localhost",
            "GIT_TERMINAL_PROMPT": "0",
        }
    )
    environment.update(env or {})
    try:
        done = subprocess.run(
            ["git", "-C", cwd, *args],
            capture_output=True,
            text=True,
            env=environment,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise WorkspaceError("git is not installed (workspaces need git >= 2.20)") from None
    except subprocess.TimeoutExpired:
        raise WorkspaceError(f"git {' '.join(args[:2])} in {cwd} took over {timeout:g} s") from None
    if done.returncode != 0:
        detail = done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}"
        raise WorkspaceError(f"git {' '.join(args[:2])} in {cwd}: {detail}")
    return done.stdout


@contextlib.contextmanager
def worktree_admin_lock(repo: str) -> Iterator[None]:
    """Held while this process changes ``repo``'s list of worktrees (add, remove, prune).
    git does not serialize those: a ``worktree prune`` run while another session's
    ``worktree add`` is half done removes the new worktree's record under it ("could not
    write .git/worktrees/<name>/gitdir", seen with three sessions starting at once)."""
    with _repo_lock(repo, "acpctl-worktrees.lock"):
        yield


@contextlib.contextmanager
def worktree_lock(repo: str, path: str) -> Iterator[None]:
    """Held by whoever makes, sets up or first checkpoints the worktree at ``path``: a
    fork's caller and the fork's own actor (started by the supervisor's sweep, which may
    come first) both prepare it, and one must not take the other's half-made worktree for a
    crash's debris and remove it. One empty file per worktree, under
    ``<git-common-dir>/acpctl-locks/`` (kept after the worktree goes: removing a lock file
    others may hold open would let two holders in)."""
    name = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:16]
    with _repo_lock(repo, os.path.join("acpctl-locks", f"{name}.lock")):
        yield


@contextlib.contextmanager
def _repo_lock(repo: str, relative: str) -> Iterator[None]:
    """An ``flock`` on a file in the repository's common git directory, so control-plane
    processes sharing a repository wait for each other too (and threads of one process:
    each call opens the file anew, and ``flock`` locks belong to the open file)."""
    common = git(["rev-parse", "--git-common-dir"], repo).strip()
    path = os.path.join(repo, common, relative)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:  # a read-only or full repository: the workspace's error, typed
        raise WorkspaceError(f"cannot lock {path}: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
