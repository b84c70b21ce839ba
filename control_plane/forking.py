"""Spawns with a workspace, and forks (``ControlPlane.spawn(workspace=...)``,
``ControlPlane.fork``): planning the worktree a session gets, and a fork's conversation,
worktree and agent session (``docs/workspaces.md``)."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from actors.client_mcp import redacted as redacted_mcp_servers
from actors.session.workspace_steps import SessionWorkspace
from actors.settings import RuntimeSettings
from actors.workspace import WorkspaceError, plan_worktree, workspace_of
from actors.workspace.checkpoint import ref_of
from actors.workspace.git import git
from store import SpawnResult, Store, queries
from store.ops.fork import ForkRefused, fork_session, turn_end
from store.writer import WriteContext


def plan_workspace(
    settings: RuntimeSettings,
    kind: str,
    cwd: str | os.PathLike[str] | None,
    key: str | None,
    base: str,
    name: str | None,
    setup: str | None,
    metadata: dict[str, Any] | None,
) -> tuple[str, dict[str, Any]]:
    """The worktree a spawn gets (planned, not made: the session's start makes it, so the
    spawn's commit is its recorded intent) and the metadata that records it."""
    if kind not in ("worktree", "none"):
        raise WorkspaceError(f"workspace {kind!r}: expected 'worktree' or 'none'")
    if kind == "none":
        return os.fspath(cwd or os.getcwd()), dict(metadata or {})
    if name is None:
        name = short_name(key)
    root = settings.workspace_root or os.path.join(os.getcwd(), "workspaces")
    planned = plan_worktree(os.fspath(cwd or os.getcwd()), name, root, base, setup)
    return planned.cwd, {**(metadata or {}), "workspace": planned.to_json()}


@dataclass(frozen=True)
class ForkRequest:
    session_id: str
    at: int | None  # the turn; None: the last that ended
    idempotency_key: str | None
    metadata: dict[str, Any] | None
    # The fork's client MCP servers (values included, kept in memory only); None: the
    # source's (its stored definitions, and the values if this process holds them).
    mcp_servers: list[dict[str, Any]] | None = None


def fork(
    store: Store, settings: RuntimeSettings, request: ForkRequest, notify: Callable[[str], None]
) -> SpawnResult:
    """The fork's spawn (``store/ops/fork.py``), its worktree made in a workspace, and its
    actor told (``notify``, whatever the worktree did: its start makes it or says why)."""
    session_id = request.session_id
    source = store.get_session(session_id)
    turn, up_to = store.read(lambda c: turn_end(c, session_id, request.at))
    later = store.read(lambda c: queries.events_of_kinds_after(c, session_id, ("prompt",), up_to))
    metadata = {**(request.metadata or {}), "forkOf": {"session": session_id, "turn": turn}}
    if not later and source.acp_session_id:
        # No prompt went to the agent after that turn: its own conversation ends there too,
        # and an agent that can fork copies it.
        metadata["forkAgentSession"] = source.acp_session_id
    servers = request.mcp_servers
    if servers is None:
        servers = settings.client_mcp.known(session_id)
        stored = source.metadata.get("mcpServers")
    else:
        stored = redacted_mcp_servers(servers)
    if stored:
        metadata["mcpServers"] = stored
    cwd = source.cwd
    workspace = workspace_of(source.metadata)
    if workspace is not None:
        commit = _checkpoint_of(workspace.repo, session_id, turn)
        if commit is None:
            raise ForkRefused(f"turn {turn} of session {session_id} has no checkpoint")
        origin = os.path.join(workspace.repo, workspace.subdir)
        name = f"fork-{short_name(request.idempotency_key)}"
        cwd, metadata = plan_workspace(
            settings, "worktree", origin, None, commit, name, workspace.setup, metadata
        )
    remember = settings.client_mcp.remembering(servers)

    def made(ctx: WriteContext) -> SpawnResult:
        result = fork_session(
            ctx, session_id, turn, up_to, source.agent, cwd, metadata, request.idempotency_key
        )
        # Before the commit: the sweep may start the fork at once. A repeat (same key) of
        # an inheriting fork leaves what the fork's own clients gave it since.
        if remember is not None and (result.created or request.mcp_servers is not None):
            remember(result)
        return result

    result = store.write(made)
    planned = workspace_of(result.session.metadata)
    try:
        if planned is not None and result.created:
            # Made now, not at its first prompt: a fork is often made to look at its files.
            fid, setup_s = result.session.id, settings.workspace_setup_s
            SessionWorkspace(planned, fid, store, settings.log_dir, setup_s).prepare()
    finally:
        notify(result.session.id)
    return result


def short_name(key: str | None) -> str:
    """12 hex: of the idempotency key (the same spawn, the same name), else new."""
    return hashlib.sha256(key.encode()).hexdigest()[:12] if key else uuid.uuid4().hex[:12]


def _checkpoint_of(repo: str, session_id: str, turn: int, wait_s: float = 10.0) -> str | None:
    """The commit of a turn's checkpoint. It is taken just after the turn's end: a fork
    asked at once waits for it a little."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return git(["rev-parse", "--verify", "--quiet", ref_of(session_id, turn)], repo).strip()
        except WorkspaceError:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
