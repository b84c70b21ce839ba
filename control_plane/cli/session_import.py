"""``acpctl sessions import FILE [--resume --agent NAME]``: a JSONL transcript as a closed,
read-only session (docs/store.md, "Import"); registered by ``cli/sessions.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from control_plane.cli.common import (
    Context,
    errors_as_exit,
    existing_file,
    fail,
    opened_store,
    out,
    print_json,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="One JSON document (or JSON lines).")]


def import_command(
    typer_ctx: typer.Context,
    file: Annotated[
        Path, typer.Argument(help="A JSONL transcript: pi, OpenClaw or acpctl; versions 1-3.")
    ],
    resume: Annotated[
        bool, typer.Option("--resume", help="Also continue it in a new session of --agent.")
    ] = False,
    agent: Annotated[
        str | None,
        typer.Option("--agent", help="With --resume: configured name, registry name, or command."),
    ] = None,
    cwd: Annotated[
        Path | None,
        typer.Option(
            "--cwd",
            help="With --resume: where the new session works (default: the transcript's cwd "
            "if it exists here, else the current directory).",
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Import a JSONL transcript as a closed, read-only session (the same file again gives
    the same session); with --resume --agent NAME, also a new session that continues it: its
    first prompt carries the conversation.

    Example: acpctl sessions import ~/.pi/agent/sessions/--repo--/s.jsonl --resume --agent claude
    """
    ctx: Context = typer_ctx.obj
    if resume != (agent is not None):
        fail("--resume needs --agent NAME, and --agent is for --resume")
    if cwd is not None and not resume:
        fail("--cwd is for --resume")
    existing_file(file)
    with errors_as_exit(), opened_store(ctx, create=True) as store:
        from control_plane.importing import import_transcript
        from protocol.transcript.reader import TranscriptFormatError

        spec, agent_cwd = ctx.config().agent(agent) if agent is not None else (None, None)
        try:
            outcome = import_transcript(store, file, resume_agent=spec, cwd=cwd or agent_cwd)
        except TranscriptFormatError as exc:
            fail(f"{file}: {exc}; nothing was imported")
    session, resumed = outcome.session, outcome.resumed
    if json_out:
        print_json(
            {
                "session": session.id,
                "created": outcome.created,
                "entries": outcome.entries,
                "imported": session.metadata.get("imported"),
                "resumed": None
                if resumed is None
                else {"session": resumed.id, "agent": resumed.agent.name, "cwd": resumed.cwd},
            }
        )
        return
    if outcome.created:
        out.print(
            f"{file}: imported as session {session.id} ({outcome.entries} entries; read-only)",
            highlight=False,
        )
    else:
        out.print(
            f"{file}: imported before as session {session.id} (same SHA-256); nothing added",
            highlight=False,
        )
    if resumed is not None:
        out.print(
            f"continued in session {resumed.id} (agent {resumed.agent.name}, cwd {resumed.cwd}):"
            " its first prompt carries the conversation",
            highlight=False,
        )
