"""Checkpoints: the worktree's files (tracked and untracked, not ignored) as a commit under
a hidden ref, ``refs/acpctl/<session>/<seq>``, made with a temporary index so the
worktree's branch, index and stash are never touched; and putting the files back.

The temporary index starts as a copy of the worktree's own: ``git add -A`` then re-reads
only what changed since (the index's stat data says which), so a checkpoint of a large
repository costs what its changes cost, not what its size does (``bench/checkpoint.py``)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from actors.workspace.git import WorkspaceError, git
from actors.workspace.spec import WorkspaceSpec
from actors.workspace.worktree import git_dir


@dataclass(frozen=True)
class Checkpoint:
    ref: str
    commit: str
    tree: str
    seconds: float


def ref_of(session_id: str, seq: int) -> str:
    return f"refs/acpctl/{session_id}/{seq}"


@contextmanager
def _scratch_index(worktree: str) -> Iterator[dict[str, str]]:
    """``GIT_INDEX_FILE`` of a temporary copy of the worktree's index."""
    own = git_dir(worktree)
    fd, path = tempfile.mkstemp(prefix="acpctl-index-", dir=own)
    os.close(fd)
    try:
        if os.path.exists(os.path.join(own, "index")):
            shutil.copyfile(os.path.join(own, "index"), path)
        else:
            os.unlink(path)  # git makes a new one
        yield {"GIT_INDEX_FILE": path}
    finally:
        if os.path.exists(path):
            os.unlink(path)


def current_tree(worktree: str) -> str:
    """The tree of the worktree's files as they are now (tracked and untracked, not
    ignored), written to the object store."""
    with _scratch_index(worktree) as env:
        git(["add", "-A", "."], worktree, env)
        return git(["write-tree"], worktree, env).strip()


def take_checkpoint(
    spec: WorkspaceSpec, session_id: str, seq: int, parent: str | None = None
) -> Checkpoint:
    """Commit the files now to ``refs/acpctl/<session>/<seq>`` on top of ``parent`` (the
    previous checkpoint; the worktree's base for the first)."""
    started = time.perf_counter()
    tree = current_tree(spec.path)
    message = f"acpctl checkpoint {session_id} {seq}"
    commit = git(["commit-tree", tree, "-p", parent or spec.base, "-m", message], spec.path).strip()
    ref = ref_of(session_id, seq)
    git(["update-ref", ref, commit], spec.path)
    return Checkpoint(ref, commit, tree, time.perf_counter() - started)


def restore(spec: WorkspaceSpec, commit: str) -> tuple[int, list[str]]:
    """Put the worktree's files back as they were at ``commit``: its files written, files
    made since removed (ignored files stay). Returns (files written, files removed).

    The checkpoint's files first, ``.gitignore`` files included: what counts as ignored is
    then what the checkpoint said, so a turn that un-ignored ``.env`` (or deleted the
    ``.gitignore``) does not get it deleted."""
    tree = git(["rev-parse", f"{commit}^{{tree}}"], spec.path).strip()
    then = _files(spec.path, tree)
    with _scratch_index(spec.path) as env:
        git(["read-tree", tree], spec.path, env)
        git(["checkout-index", "-a", "-f"], spec.path, env)
    now = set(_files(spec.path, current_tree(spec.path)))
    removed = sorted(now - set(then))
    for name in removed:
        target = os.path.join(spec.path, name)
        try:
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target)  # a repository a turn cloned in (a gitlink)
            elif os.path.lexists(target):
                os.unlink(target)
        except OSError as exc:
            raise WorkspaceError(f"restoring {spec.path}: cannot remove {name}: {exc}") from exc
    return len(then), removed


def changed_since(spec: WorkspaceSpec, commit: str) -> bool:
    """Whether the files differ from ``commit`` (work a prune would lose)."""
    tree = git(["rev-parse", f"{commit}^{{tree}}"], spec.path).strip()
    return current_tree(spec.path) != tree


def diff(spec: WorkspaceSpec, before: str, after: str) -> str:
    return git(["diff", "--no-color", before, after], spec.repo)


def diffstat(spec: WorkspaceSpec, before: str, after: str) -> str:
    return git(["diff", "--shortstat", before, after], spec.repo).strip()


def _files(worktree: str, tree: str) -> list[str]:
    out = git(["ls-tree", "-r", "-z", "--name-only", tree], worktree)
    return [name for name in out.split("\0") if name]
