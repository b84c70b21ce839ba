"""What a session's workspace is (kept in its metadata, ``workspace``) and planning one
before the spawn: a path and a branch that depend only on the spawn's name, so the same
spawn (same idempotency key) always means the same worktree."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import asdict, dataclass
from typing import Any

from actors.workspace.git import WorkspaceError, git

KINDS = ("worktree",)


@dataclass(frozen=True)
class WorkspaceSpec:
    kind: str  # "worktree"
    repo: str  # the source repository's top level
    path: str  # the worktree's directory
    branch: str  # acpctl/<name>
    base: str  # the commit the worktree starts at (the ref asked for, resolved at planning)
    subdir: str = ""  # the session's cwd inside the worktree ("" is its top)
    setup: str | None = None  # a shell command run in the new worktree before the agent

    @property
    def cwd(self) -> str:
        return os.path.join(self.path, self.subdir) if self.subdir else self.path

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def workspace_of(metadata: dict[str, Any]) -> WorkspaceSpec | None:
    data = metadata.get("workspace")
    if not isinstance(data, dict):
        return None
    return WorkspaceSpec(**{k: data[k] for k in WorkspaceSpec.__dataclass_fields__ if k in data})


def plan_worktree(
    cwd: str, name: str, root: str, base: str = "HEAD", setup: str | None = None
) -> WorkspaceSpec:
    """The worktree a spawn in ``cwd`` will get: ``WorkspaceError`` (nothing created) when
    ``cwd`` is not in a git repository or ``base`` names no commit."""
    if not os.path.isdir(cwd):
        raise WorkspaceError(f"{cwd} is not a directory")
    try:
        top = git(["rev-parse", "--show-toplevel"], cwd).strip()
    except WorkspaceError:
        raise WorkspaceError(
            f"{cwd} is not in a git repository: a worktree workspace needs one "
            "(git init, or run without --workspace)"
        ) from None
    try:
        commit = git(["rev-parse", "--verify", "--quiet", f"{base}^{{commit}}"], top).strip()
    except WorkspaceError:
        raise WorkspaceError(f"--base {base!r} names no commit in {top}") from None
    safe = safe_name(name)
    # Two names that clean to the same text ("fix bug", "fix-bug") must not share a
    # worktree: the branch keeps the clean name when it is the name itself, the directory
    # always carries the name's hash (and never nests in another's).
    tag = hashlib.sha256(name.encode()).hexdigest()[:6]
    branch = safe if safe == name else f"{safe}-{tag}"
    leaf = f"{safe.replace('/', '-')}-{tag}"
    subdir = os.path.relpath(os.path.realpath(cwd), os.path.realpath(top))
    return WorkspaceSpec(
        kind="worktree",
        repo=top,
        path=os.path.join(os.path.abspath(root), os.path.basename(top), leaf),
        branch=f"acpctl/{branch}",
        base=commit,
        subdir="" if subdir == "." else subdir,
        setup=setup,
    )


def safe_name(name: str) -> str:
    """``name`` as a branch component: letters, digits, ``-_./``; no ``..``, no leading or
    trailing ``/`` or ``.`` (what ``git check-ref-format`` refuses)."""
    cleaned = re.sub(r"[^A-Za-z0-9._/-]+", "-", name).strip("/.")
    cleaned = re.sub(r"\.{2,}", ".", re.sub(r"/{2,}", "/", cleaned))
    cleaned = "/".join(part.strip(".") or "x" for part in cleaned.split("/"))
    if cleaned.endswith(".lock"):
        cleaned = cleaned[: -len(".lock")] + "-lock"
    return cleaned or "session"
