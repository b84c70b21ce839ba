"""The console's view of a session's workspace (``docs/workspaces.md``): its checkpoints, and
the files a turn changed (the unified diff of its checkpoint against the one before).

- ``GET /api/sessions/{id}/workspace``: ``{workspace: null}`` for a session without one,
  else ``{workspace: {path, branch, base, exists}, turns: [{seq, ref, commit}]}`` (the turns
  with a checkpoint, oldest first).
- ``GET /api/sessions/{id}/turns/{seq}/diff``: ``{seq, ref, before, after, diff, truncated}``
  (``seq`` a prompt's command seq, as the checkpoint refs name it); ``diff`` is git's unified
  diff, at most ``DIFF_LIMIT`` characters.

Same tokens as the rest of the API. A session without a workspace, or a turn without a
checkpoint, is a 404 with the reason; a seq that is not a number is a 400; a repository git
cannot read any more (moved, deleted) is a 409 with git's words.
"""

from __future__ import annotations

import os
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from actors.workspace import WorkspaceError, WorkspaceSpec, workspace_of
from actors.workspace import diff as workspace_diff
from control_plane.remote.auth import error_response, unauthorized
from control_plane.remote.console_api import Refused, answer, request_token, seen
from control_plane.remote.hub import Hub
from control_plane.workspace_views import (
    CHECKPOINT_KINDS,
    CheckpointRef,
    NoCheckpoint,
    checkpoints_in,
    turn_range,
)
from store.tokens import TokenRecord

DIFF_LIMIT = 1_000_000  # characters of diff text sent to a browser


def _opened(hub: Hub, token: TokenRecord, session_id: str) -> WorkspaceSpec | None:
    return workspace_of(seen(hub, token, session_id).metadata)


def _marks(hub: Hub, session_id: str) -> list[CheckpointRef]:
    return checkpoints_in(hub.cp.events_of_kinds(session_id, CHECKPOINT_KINDS))


def _workspace(hub: Hub, token: TokenRecord, session_id: str) -> dict[str, Any]:
    spec = _opened(hub, token, session_id)
    if spec is None:
        return {"workspace": None, "turns": []}
    return {
        "workspace": {
            "path": spec.path,
            "branch": spec.branch,
            "base": spec.base,
            "exists": os.path.isdir(spec.path),
        },
        "turns": [
            {"seq": m.seq, "ref": m.ref, "commit": m.commit} for m in _marks(hub, session_id)[1:]
        ],
    }


def _diff(hub: Hub, token: TokenRecord, session_id: str, seq: int) -> dict[str, Any]:
    spec = _opened(hub, token, session_id)
    if spec is None:
        raise Refused(404, f"session {session_id} has no workspace")
    marks = _marks(hub, session_id)
    try:
        before, after = turn_range(session_id, marks, seq)
    except NoCheckpoint as exc:
        raise Refused(404, str(exc)) from None
    try:
        text = workspace_diff(spec, before, after)
    except WorkspaceError as exc:
        raise Refused(409, f"the workspace's repository cannot be read: {exc}") from None
    ref = next(m.ref for m in marks if m.commit == after and m.seq == seq)
    return {
        "seq": seq,
        "ref": ref,
        "before": before,
        "after": after,
        "diff": text[:DIFF_LIMIT],
        "truncated": len(text) > DIFF_LIMIT,
    }


async def workspace(request: Request) -> Response:
    return await answer(request, _workspace)


async def turn_diff(request: Request) -> Response:
    seq = request.path_params["seq"]
    if not seq.isdigit() or len(seq) > 12:
        if request_token(request) is None:
            return unauthorized()
        return error_response(400, f"a turn is a prompt's seq (a number), not {seq[:40]!r}")
    return await answer(request, _diff, int(seq))


ROUTES = [
    Route("/api/sessions/{id}/workspace", workspace),
    Route("/api/sessions/{id}/turns/{seq}/diff", turn_diff),
]
