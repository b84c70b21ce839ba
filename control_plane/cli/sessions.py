"""``acpctl sessions ...``, ``acpctl events``, ``acpctl status``: looking at the store.

The store's modules (SQLAlchemy) are imported once the store is open, so ``--help`` and a
missing store stay fast.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.tree import Tree

from control_plane.cli import session_history, session_import
from control_plane.cli.common import (
    Context,
    errors_as_exit,
    fail,
    opened,
    opened_store,
    out,
    print_json,
)
from state_machines import CommandState, SessionState

if TYPE_CHECKING:  # the store (SQLAlchemy) is imported by the commands that open it
    from store import EventRecord, SessionRecord

app = typer.Typer(
    help="List, inspect, export, import, cancel and close sessions.", no_args_is_help=True
)

JsonFlag = Annotated[bool, typer.Option("--json", help="One JSON document (or JSON lines).")]


def session_json(s: SessionRecord) -> dict[str, Any]:
    return {
        "id": s.id,
        "state": s.state.value,
        "agent": s.agent.name,
        "cwd": s.cwd,
        "parentId": s.parent_id,
        "createdAt": s.created_at.isoformat(),
        "updatedAt": s.updated_at.isoformat(),
        "lastError": s.last_error,
        "metadata": s.metadata,
    }


@app.command("list")
def list_sessions(
    typer_ctx: typer.Context,
    state: Annotated[SessionState | None, typer.Option(help="Only sessions in this state.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10000, help="Page size.")] = 50,
    after: Annotated[
        str | None, typer.Option(help="Cursor: the last id of the previous page.")
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """List stored sessions, oldest first, a page at a time.

    Example: acpctl sessions list --state idle --limit 20
    """
    ctx: Context = typer_ctx.obj
    with errors_as_exit(), opened_store(ctx) as store:
        page = store.list_sessions(state=state, limit=limit, after_id=after)
    if json_out:
        print_json(
            {
                "sessions": [session_json(s) for s in page],
                "nextCursor": page[-1].id if len(page) == limit else None,
            }
        )
        return
    table = Table("id", "state", "agent", "cwd", "updated")
    for s in page:
        table.add_row(
            s.id, s.state.value, s.agent.name, s.cwd, s.updated_at.strftime("%Y-%m-%d %H:%M:%S")
        )
    out.print(table)
    if len(page) == limit:
        out.print(f"next page: --after {page[-1].id}")


@app.command()
def show(
    typer_ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(help="Session id.")],
    events: Annotated[int, typer.Option(help="How many of the last events to show.")] = 10,
    json_out: JsonFlag = False,
) -> None:
    """Show one session: state, commands, children and its last events.

    Example: acpctl sessions show 3f2c...
    """
    ctx: Context = typer_ctx.obj
    with errors_as_exit(), opened_store(ctx) as store:
        from actors.delivery.sinks import event_line

        session = store.get_session(session_id)
        commands = store.commands_of(session_id)
        children = store.list_sessions(parent_id=session_id, limit=1000)
        last = max(0, session.last_event_seq - events)
        recent = store.events(session_id, after_seq=last)
        usage = store.usage(session_id)
    stopped = None if usage.stopped is None else usage.stopped.to_json()
    if json_out:
        print_json(
            {
                **session_json(session),
                "usage": usage.usage.to_json(),
                "stoppedByBudget": stopped,
                "commands": [
                    {
                        "id": c.id,
                        "seq": c.seq,
                        "kind": c.kind.value,
                        "state": c.state.value,
                        "attempts": c.attempts,
                        "error": c.error,
                        "result": c.result,
                    }
                    for c in commands
                ],
                "children": [session_json(c) for c in children],
                "events": [event_line(e) for e in recent],
            }
        )
        return
    out.print(
        f"[bold]{session.id}[/]  {session.state.value}  "
        f"agent={session.agent.name}  cwd={session.cwd}"
    )
    if session.last_error:
        out.print(f"last error: {session.last_error}")
    imported = session.metadata.get("imported")
    if isinstance(imported, dict):
        out.print(
            f"imported from {imported.get('file')} (its session {imported.get('headerId')}, "
            f"version {imported.get('version')}, {imported.get('entries')} entries) "
            f"at {imported.get('importedAt')}; read-only",
            highlight=False,
        )
    used = usage.usage
    out.print(
        f"usage: {used.total_tokens} tokens ({used.input_tokens} in, {used.output_tokens} out)"
        f", ${used.cost_usd:.4f}",
        highlight=False,
    )
    if usage.stopped is not None:
        out.print(
            f"stopped by its {usage.stopped.budget} budget: "
            f"{usage.stopped.used:g} used of {usage.stopped.limit:g}",
            highlight=False,
        )
    table = Table("seq", "kind", "state", "attempts", "outcome")
    for c in commands:
        outcome = c.error or (c.result or {}).get("stopReason") or ""
        table.add_row(str(c.seq), c.kind.value, c.state.value, str(c.attempts), str(outcome))
    out.print(table)
    if children:
        out.print("children: " + ", ".join(f"{c.id} ({c.state.value})" for c in children))
    for e in recent:
        out.print(f"  #{e.seq} {e.kind} {e.raw[:100]}", highlight=False)


@app.command()
def tree(
    typer_ctx: typer.Context,
    root: Annotated[str | None, typer.Argument(help="Start at this session.")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Show sessions as a parent/child tree with their states."""
    ctx: Context = typer_ctx.obj
    with errors_as_exit(), opened_store(ctx) as store:
        from store import queries

        everything = store.read(lambda c: queries.list_sessions(c, limit=100000))
    by_parent: dict[str | None, list[SessionRecord]] = {}
    for s in everything:
        by_parent.setdefault(s.parent_id, []).append(s)
    roots = [s for s in everything if s.id == root] if root else by_parent.get(None, [])
    if root and not roots:
        fail(f"no session with id {root!r}")

    def as_json(s: SessionRecord) -> dict[str, Any]:
        return {**session_json(s), "children": [as_json(c) for c in by_parent.get(s.id, [])]}

    if json_out:
        print_json([as_json(s) for s in roots])
        return
    view = Tree("sessions")

    def add(node: Tree, s: SessionRecord) -> None:
        child = node.add(f"{s.id} [dim]{s.agent.name}[/] {s.state.value}")
        for c in by_parent.get(s.id, []):
            add(child, c)

    for s in roots:
        add(view, s)
    out.print(view)


@app.command()
def export(
    typer_ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(help="Session id.")],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="File (default: <id>.jsonl).")
    ] = None,
) -> None:
    """Export a session as a JSONL transcript v3 file (pi / OpenClaw session format)."""
    ctx: Context = typer_ctx.obj
    with errors_as_exit(), opened_store(ctx) as store:
        from control_plane.export import export_session

        path = export_session(store, session_id, output or Path(f"{session_id}.jsonl"))
    out.print(str(path))


@app.command()
def close(
    typer_ctx: typer.Context, session_id: Annotated[str, typer.Argument(help="Session id.")]
) -> None:
    """Close a session for good (open commands are cancelled)."""
    ctx: Context = typer_ctx.obj
    with errors_as_exit(), opened(ctx, run_sessions=False) as cp:
        state = cp.close_session(session_id, "closed from acpctl").state
    out.print(f"{session_id} {state.value}")


@app.command()
def cancel(
    typer_ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(help="Session id.")],
    queued: Annotated[bool, typer.Option("--queued", help="Also cancel queued commands.")] = False,
) -> None:
    """Cancel the running turn (and with --queued everything queued)."""
    ctx: Context = typer_ctx.obj
    with errors_as_exit(), opened(ctx, run_sessions=False) as cp:
        state = cp.cancel(session_id, include_queued=queued)
    out.print(f"{session_id} {state.value}")


def events_command(
    typer_ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(help="Session id.")],
    after: Annotated[int, typer.Option(help="Start after this seq.")] = 0,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events.")
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Print a session's events (JSON lines with --json); --follow tails them as they happen.

    Example: acpctl events 3f2c... --follow --json
    """
    ctx: Context = typer_ctx.obj
    from actors.delivery.sinks import event_line

    with errors_as_exit(), _event_stream(ctx, session_id, after, follow) as stream:
        for e in stream:
            if json_out:
                print_json(event_line(e))
            else:
                out.print(
                    f"#{e.seq} {e.created_at:%H:%M:%S} {e.kind} {e.raw[:160]}", highlight=False
                )


@contextmanager
def _event_stream(
    ctx: Context, session_id: str, after: int, follow: bool
) -> Iterator[Iterable[EventRecord]]:
    """The stored events, from the store alone; with ``follow``, then the new ones as other
    processes commit them (polled: this process commits nothing itself)."""
    with opened_store(ctx) as store:
        if not follow:
            yield store.events(session_id, after)
            return
        from control_plane.waiting import Waiters

        store.get_session(session_id)  # an unknown id is an error, not an empty tail
        waiters = Waiters(store)
        try:
            yield waiters.events(session_id, after, None)
        finally:
            waiters.close()


def status_command(typer_ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """Store path, sessions by state, running turns, queue depth, last recovery."""
    ctx: Context = typer_ctx.obj
    with errors_as_exit(), opened_store(ctx) as store:
        from store import queries
        from store.ownership import this_owner

        by_state = store.read(queries.count_sessions_by_state)
        queued = store.read(lambda c: queries.count_commands(c, CommandState.QUEUED))
        running = store.read(lambda c: queries.count_commands(c, CommandState.RUNNING))
        orphaned = store.read(
            lambda c: queries.orphaned_sessions(c, this_owner(), include_mine=False)
        )
        interrupted = store.read(queries.interrupted_counts)
        usage, stopped = store.read(queries.usage_totals)
        nodes = store.read(queries.node_views)
        waiting = store.read(queries.waiting_for_placement)
        path = store.path
    report: dict[str, Any] = {
        "store": path,
        "sessions": by_state,
        "runningTurns": running,
        "queueDepth": queued,
        "recovery": {
            "awaitingRecovery": len(orphaned),
            "interruptedRuns": interrupted["total"],
            "retried": interrupted["retried"],
            "failedAfterBudget": interrupted["failed"],
        },
        "usage": usage.to_json(),
        "stoppedByBudget": stopped,
        "nodes": nodes,
        "waitingForPlacement": [{"session": s, "placement": p} for s, p in waiting],
    }
    if json_out:
        print_json(report)
        return
    out.print(f"store: {path}")
    table = Table("state", "sessions")
    for name in SessionState:
        table.add_row(name.value, str(by_state.get(name.value, 0)))
    out.print(table)
    out.print(f"running turns: {running}   queued commands: {queued}")
    rec = report["recovery"]
    assert isinstance(rec, dict)
    out.print(
        f"recovery: {rec['interruptedRuns']} interrupted runs so far ({rec['retried']} retried, "
        f"{rec['failedAfterBudget']} failed after their attempt budget); "
        f"{rec['awaitingRecovery']} sessions of dead owners await a running control plane's "
        "next discovery (within seconds; at the next open when none runs)"
    )
    out.print(
        f"usage: {usage.total_tokens} tokens, ${usage.cost_usd:.4f}; "
        f"{stopped} sessions stopped by a budget",
        highlight=False,
    )
    from control_plane.cli.nodes_view import print_nodes

    print_nodes(report["nodes"], report["waitingForPlacement"])


# A workspace session's diff, forks and rewinds (control_plane/cli/session_history.py).
app.command()(session_history.diff)
app.command()(session_history.fork)
app.command()(session_history.rewind)
# A transcript brought in (control_plane/cli/session_import.py).
app.command("import")(session_import.import_command)
