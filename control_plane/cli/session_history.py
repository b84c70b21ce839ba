"""``acpctl sessions diff|fork|rewind``: a workspace session's changes between its
checkpoints, and new sessions from one of its turns (``docs/workspaces.md``)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from control_plane.cli.common import (
    Context,
    errors_as_exit,
    fail,
    opened,
    opened_store,
    out,
    print_json,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="One JSON document.")]


def diff(
    typer_ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(help="Session id.")],
    turn: Annotated[
        int | None,
        typer.Option(
            "--turn",
            help="One turn's changes (its command seq, as the checkpoint refs name it); "
            "default: everything since the worktree was made.",
        ),
    ] = None,
) -> None:
    """A unified diff of a session's workspace, between its checkpoints."""
    from actors.workspace import diff as workspace_diff
    from actors.workspace import workspace_of
    from control_plane.workspace_views import NoCheckpoint, checkpoints, turn_range

    ctx: Context = typer_ctx.obj
    with errors_as_exit(), opened_store(ctx) as store:
        spec = workspace_of(store.get_session(session_id).metadata)
        if spec is None:
            fail(f"session {session_id} has no workspace (spawned without --workspace)")
        try:
            before, after = turn_range(session_id, checkpoints(store, session_id), turn)
        except NoCheckpoint as exc:
            fail(str(exc))
        text = workspace_diff(spec, before, after)
    sys.stdout.write(text)


def fork(
    typer_ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(help="Session id.")],
    at: Annotated[
        int | None,
        typer.Option("--at", help="The turn (a prompt's seq); default: the last finished one."),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """A new session with this one's conversation up to the end of a turn, and (in a
    workspace) a worktree at that turn's checkpoint. Its agent starts at its first prompt
    and is sent the conversation with it."""
    _fork(typer_ctx, session_id, at, supersede=False, json_out=json_out)


def rewind(
    typer_ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(help="Session id.")],
    to: Annotated[int, typer.Option("--to", help="The turn (a prompt's seq) to go back to.")],
    json_out: JsonFlag = False,
) -> None:
    """fork --at TURN, and this session closed as superseded by the new one."""
    _fork(typer_ctx, session_id, to, supersede=True, json_out=json_out)


def _fork(
    typer_ctx: typer.Context, session_id: str, at: int | None, supersede: bool, json_out: bool
) -> None:
    ctx: Context = typer_ctx.obj
    with errors_as_exit(), opened(ctx, run_sessions=False) as cp:
        result = cp.fork(session_id, at, supersede=supersede)
        fork_of = result.session.metadata.get("forkOf", {})
        data = {
            "session": result.session.id,
            "forkOf": fork_of,
            "cwd": result.session.cwd,
            "superseded": session_id if supersede else None,
        }
    if json_out:
        print_json(data)
    else:
        out.print(
            f"{data['session']}: session {session_id} up to turn {fork_of.get('turn')}"
            f"{', which is closed as superseded' if supersede else ''}; cwd {data['cwd']}",
            highlight=False,
        )
