"""Reading workspaces back from the store: a session's checkpoints in order (from its log),
what ``acpctl workspaces list`` shows, and what ``prune`` may remove."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from actors.workspace import WorkspaceError, WorkspaceSpec, changed_since, workspace_of
from state_machines import ControlPlaneError, SessionState
from store import EventRecord, SessionRecord, Store, queries

CHECKPOINT_KINDS = ("workspace_ready", "checkpoint")


@dataclass(frozen=True)
class CheckpointRef:
    seq: int  # the turn's command seq; 0: the worktree as made (and set up)
    ref: str
    commit: str


class NoCheckpoint(ControlPlaneError):
    """The session has no checkpoint yet, or none of the turn asked for (the message says
    which turns have one)."""


def checkpoints(store: Store, session_id: str) -> list[CheckpointRef]:
    """The session's checkpoints, oldest first, as its log records them."""
    kinds = CHECKPOINT_KINDS
    return checkpoints_in(
        store.read(lambda c: queries.events_of_kinds_after(c, session_id, kinds, 0))
    )


def checkpoints_in(events: Iterable[EventRecord]) -> list[CheckpointRef]:
    """The checkpoints among a session's ``workspace_ready`` and ``checkpoint`` events."""
    found = []
    for event in events:
        payload = event.payload
        if "commit" not in payload:
            continue  # a checkpoint that failed (its error is in the payload)
        seq = 0 if event.kind == "workspace_ready" else int(payload.get("seq", 0))
        found.append(CheckpointRef(seq, str(payload["ref"]), str(payload["commit"])))
    return found


def turn_range(session_id: str, marks: list[CheckpointRef], turn: int | None) -> tuple[str, str]:
    """The commits a diff goes between: the worktree as made to the last checkpoint, or
    with ``turn``, that turn's checkpoint against the one before it."""
    if not marks:
        raise NoCheckpoint(f"session {session_id} has no checkpoint yet")
    if turn is None:
        return marks[0].commit, marks[-1].commit
    index = next((i for i, m in enumerate(marks) if m.seq == turn and i), None)
    if index is None:
        seqs = ", ".join(str(m.seq) for m in marks[1:]) or "none"
        raise NoCheckpoint(f"session {session_id} has no checkpoint of turn {turn} (turns: {seqs})")
    return marks[index - 1].commit, marks[index].commit


def workspace_sessions(store: Store) -> list[tuple[SessionRecord, WorkspaceSpec]]:
    """Every session that has a workspace, oldest first."""
    found: list[tuple[SessionRecord, WorkspaceSpec]] = []
    after: str | None = None
    while True:
        page = store.list_sessions(limit=1000, after_id=after)
        for session in page:
            spec = workspace_of(session.metadata)
            if spec is not None:
                found.append((session, spec))
        if len(page) < 1000:
            return found
        after = page[-1].id


def describe(store: Store, session: SessionRecord, spec: WorkspaceSpec) -> dict[str, Any]:
    marks = checkpoints(store, session.id)
    exists = os.path.isdir(spec.path)
    row: dict[str, Any] = {
        "session": session.id,
        "state": session.state.value,
        "path": spec.path,
        "branch": spec.branch,
        "exists": exists,
        "checkpoint": marks[-1].ref if marks else None,
        "changedSinceCheckpoint": None,
    }
    if exists:
        try:
            row["changedSinceCheckpoint"] = changed_since(
                spec, marks[-1].commit if marks else spec.base
            )
        except WorkspaceError as exc:
            row["error"] = str(exc)
    return row


def prunable(row: dict[str, Any]) -> bool:
    return bool(row["exists"]) and row["state"] == SessionState.CLOSED.value
