"""``acpctl search QUERY``: sessions by what was said in them (prompts, the agents' answers,
tool titles), newest match first, from the store's full-text index (docs/store.md)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from control_plane.cli.common import Context, errors_as_exit, opened_store, out, print_json
from state_machines import SessionState


def search_command(
    typer_ctx: typer.Context,
    query: Annotated[str, typer.Argument(help='Words (all must match), "a phrase", prefix*.')],
    agent: Annotated[
        str | None, typer.Option(help="Only sessions of this agent (its name or command).")
    ] = None,
    state: Annotated[
        str | None, typer.Option(help="Only sessions in these states (comma-separated).")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Only what was said since: 7d, 12h, or a date.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Sessions at most.")] = 20,
    before: Annotated[
        int | None, typer.Option(help="Cursor: the nextCursor of the previous page.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
) -> None:
    """Find sessions by what was said in them, newest match first.

    Examples: acpctl search "flaky test" --state closed,error --since 7d
              acpctl search refactor* --agent claude --json
    """
    ctx: Context = typer_ctx.obj
    with errors_as_exit():
        from control_plane.timespec import parse_since
        from store.queries.search import SearchFilters
        from store.search_query import SearchQuery

        parsed = SearchQuery.parse(query)
        filters = SearchFilters(
            agent=agent,
            states=_states(state),
            since=None if since is None else parse_since(since),
            before=before,
        )
        with opened_store(ctx) as store:
            hits = store.search(parsed, filters, limit)
    cursor = hits[-1].doc_id if len(hits) == limit else None
    if json_out:
        print_json(
            {
                "hits": [
                    {
                        "sessionId": h.session.id,
                        "state": h.session.state.value,
                        "agent": h.session.agent.name,
                        "cwd": h.session.cwd,
                        "commandId": h.command_id,
                        "seq": h.seq,
                        "role": h.role,
                        "at": h.at.isoformat(),
                        "snippet": h.snippet,
                    }
                    for h in hits
                ],
                "nextCursor": cursor,
            }
        )
        return
    if not hits:
        out.print("no session matches")
        return
    # Two lines a hit, not a table: the id stays whole (it is what gets copied) and the
    # snippet gets the width, in a terminal of any size.
    for h in hits:
        when = h.at.strftime("%Y-%m-%d %H:%M")
        facts = f"{h.session.state.value}  {h.session.agent.name}  {when}  {h.role}"
        out.print(f"[bold]{h.session.id}[/bold]  {facts}", highlight=False, soft_wrap=True)
        out.print(f"    {escape(h.snippet)}", highlight=False, soft_wrap=True)
    if cursor is not None:
        out.print(f"next page: --before {cursor}")


def _states(text: str | None) -> tuple[SessionState, ...]:
    if not text:
        return ()
    known = {s.value: s for s in SessionState}
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        from control_plane.cli.common import fail

        fail(f"no session state {', '.join(unknown)}; states: {', '.join(known)}")
    return tuple(known[n] for n in names)
