"""``acpctl tokens``: the access tokens of ``acpctl serve --listen`` (create, list, revoke).
A token's secret is printed once, at creation; the store keeps only its digest."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated

import typer

from control_plane.cli.common import Context, errors_as_exit, opened_store, out, print_json

app = typer.Typer(help="Access tokens for serve --listen.", no_args_is_help=True)


class Access(StrEnum):
    CONTROL = "control"
    WATCH = "watch"


class Sessions(StrEnum):
    ALL = "all"
    OWN = "own"


def _when(ts: float | None) -> str:
    return "" if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


@app.command("create")
def create(
    typer_ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Who or what holds it (a person, a gateway).")],
    access: Annotated[
        Access, typer.Option(help="control: prompts, cancel, permissions; watch: read only.")
    ] = Access.CONTROL,
    sessions: Annotated[
        Sessions, typer.Option(help="all sessions, or only those this token creates.")
    ] = Sessions.ALL,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Create a token and print its secret (shown this once; keep it like a password).

    Example: acpctl tokens create laptop --access control --sessions own"""
    from control_plane.tokens import create_token
    from store.tokens import TokenAccess, TokenSessions

    ctx: Context = typer_ctx.obj
    with errors_as_exit(), opened_store(ctx, create=True) as store:
        record, secret = create_token(
            store, name, TokenAccess(access.value), TokenSessions(sessions.value)
        )
    if json_out:
        print_json({"id": record.id, "name": name, "secret": secret})
        return
    out.print(f"token {record.id} ({name}: {access.value}, {sessions.value} sessions)")
    print(secret)


@app.command("list")
def list_command(
    typer_ctx: typer.Context, json_out: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """List the tokens (never their secrets), revoked ones included."""
    from control_plane.tokens import list_tokens

    ctx: Context = typer_ctx.obj
    with errors_as_exit(), opened_store(ctx) as store:
        tokens = list_tokens(store)
    if json_out:
        print_json(
            [
                {
                    "id": t.id,
                    "name": t.name,
                    "access": t.access.value,
                    "sessions": t.sessions.value,
                    "createdAt": _when(t.created_at),
                    "revokedAt": _when(t.revoked_at) or None,
                }
                for t in tokens
            ]
        )
        return
    for t in tokens:
        state = f"revoked {_when(t.revoked_at)}" if t.revoked_at else "active"
        out.print(
            f"{t.id}  {t.name}  {t.access.value}  {t.sessions.value}  {state}", highlight=False
        )


@app.command("revoke")
def revoke(
    typer_ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The token's name or id.")],
) -> None:
    """Revoke a token: a running server refuses it within a second, no restart."""
    from control_plane.tokens import revoke_token

    ctx: Context = typer_ctx.obj
    with errors_as_exit(), opened_store(ctx) as store:
        revoked = revoke_token(store, name)
    for t in revoked:
        out.print(f"revoked {t.id} ({t.name})", highlight=False)
