"""``acpctl workspaces``: the worktrees of sessions (list) and removing those of closed
sessions (prune), never a worktree whose files changed after its last checkpoint unless
asked to (ignored files, build output and the like, go with the worktree)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from control_plane.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    Context,
    errors_as_exit,
    opened_store,
    out,
    print_json,
)

app = typer.Typer(help="Worktree workspaces: list, prune.", no_args_is_help=True)


@app.command("list")
def list_workspaces(
    typer_ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON array.")] = False,
) -> None:
    """Every session's worktree: its state, path, branch, last checkpoint, and whether its
    files changed since that checkpoint."""
    from control_plane.workspace_views import describe, workspace_sessions

    ctx: Context = typer_ctx.obj
    with errors_as_exit(), opened_store(ctx) as store:
        rows = [describe(store, s, spec) for s, spec in workspace_sessions(store)]
    if json_out:
        print_json(rows)
        return
    table = Table("session", "state", "branch", "path", "checkpoint", "changed")
    for row in rows:
        changed = {None: "-", True: "yes", False: "no"}[row["changedSinceCheckpoint"]]
        path = row["path"] if row["exists"] else f"{row['path']} (removed)"
        checkpoint = (row["checkpoint"] or "-").rsplit("/", 1)[-1]
        table.add_row(row["session"][:8], row["state"], row["branch"], path, checkpoint, changed)
    out.print(table)


@app.command("prune")
def prune(
    typer_ctx: typer.Context,
    force: Annotated[
        bool, typer.Option("--force", help="Also remove worktrees changed since their checkpoint.")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what, remove nothing.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Remove the worktrees of closed sessions, ignored files included. Their branches and
    checkpoint refs stay (the work is in them: `acpctl sessions diff` still shows it). A
    worktree whose files changed after its last checkpoint is kept unless --force (exit 1
    when one is kept)."""
    from actors.workspace import WorkspaceError, remove_worktree
    from control_plane.workspace_views import describe, prunable, workspace_sessions

    ctx: Context = typer_ctx.obj
    removed, kept = [], []
    with errors_as_exit(), opened_store(ctx) as store:
        for session, spec in workspace_sessions(store):
            row = describe(store, session, spec)
            if not prunable(row):
                continue
            if row["changedSinceCheckpoint"] is not False and not force:
                why = row.get("error") or "files changed after its last checkpoint"
                kept.append({"session": session.id, "path": spec.path, "reason": why})
                continue
            if not dry_run:
                try:
                    remove_worktree(spec)
                except WorkspaceError as exc:
                    kept.append({"session": session.id, "path": spec.path, "reason": str(exc)})
                    continue
            removed.append({"session": session.id, "path": spec.path})
    if json_out:
        print_json({"removed": removed, "kept": kept, "dryRun": dry_run})
    else:
        verb = "would remove" if dry_run else "removed"
        for item in removed:
            out.print(f"{verb} {item['path']} ({item['session']})", highlight=False)
        for item in kept:
            out.print(f"kept {item['path']}: {item['reason']}", highlight=False)
    raise typer.Exit(EXIT_FAILED if kept else EXIT_OK)
