"""``acpctl agents``: the agents this machine can run by name (list), how one resolves
(show), and whether it really starts and what it can do (doctor)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from control_plane.cli.common import EXIT_FAILED, EXIT_OK, Context, errors_as_exit, out, print_json

app = typer.Typer(help="Agents by name: list, show, doctor.", no_args_is_help=True)


def _listing(ctx: Context) -> list[dict[str, Any]]:
    from control_plane.agents.install import NotLocated, locate
    from control_plane.agents.registry import ALIASES, snapshot

    config = ctx.config()
    rows: list[dict[str, Any]] = []
    for name, section in sorted(config.agents.items()):
        command = section.command
        rows.append(
            {
                "name": name,
                "source": "config",
                "command": command if command is None or isinstance(command, str) else
                " ".join(command),
                "runs": "as configured" if command else "registry command",
            }
        )  # fmt: skip
    rows.append({"name": "example", "source": "bundled", "command": None, "runs": "installed"})
    aliases: dict[str, list[str]] = {}
    for short, target in ALIASES.items():
        aliases.setdefault(target, []).append(short)
    for entry in snapshot():
        if entry.id in config.agents:
            continue
        found = locate(entry)
        runs = found.how if not isinstance(found, NotLocated) else "not installed"
        rows.append(
            {
                "name": entry.id,
                "aliases": sorted(aliases.get(entry.id, [])),
                "source": "registry",
                "title": entry.name,
                "registryVersion": entry.version,
                "runs": runs,
                "installedVersion": None if isinstance(found, NotLocated) else found.version,
            }
        )
    return rows


@app.command("list")
def list_agents(
    typer_ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON array.")] = False,
) -> None:
    """Every name --agent takes: configured agents, the bundled example, and the ACP
    registry's agents (from the snapshot in the package) with how each runs here:
    installed (its command found), npx/uvx (fetched at first start), or not installed."""
    with errors_as_exit():
        rows = _listing(typer_ctx.obj)
    if json_out:
        print_json(rows)
        return
    table = Table("name", "also", "source", "runs here", "version")
    for row in rows:
        version = row.get("installedVersion") or row.get("registryVersion") or ""
        table.add_row(
            row["name"], ", ".join(row.get("aliases", [])), row["source"], row["runs"], version
        )
    out.print(table)


@app.command("show")
def show(
    typer_ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="A configured name, registry id or alias.")],
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """How NAME resolves: where it was found, the command it runs, the installed and the
    registry's version, its distributions, and the env variable names its configuration
    sets or forwards (never their values). Starts nothing (see `agents doctor`)."""
    from control_plane.agents.doctor import describe
    from control_plane.agents.registry import snapshot

    ctx: Context = typer_ctx.obj
    with errors_as_exit():
        config = ctx.config()
        report, _ = describe(name, config)
    data = report.to_json()
    data.pop("handshake")
    data.pop("usable")
    entry = snapshot().get(name)
    if entry is not None:
        data["registry"] = {
            "title": entry.name,
            "description": entry.description,
            "repository": entry.repository,
            "distribution": entry.raw.get("distribution", {}),
        }
    if json_out:
        print_json(data)
    else:
        for key, value in data.items():
            if value not in (None, [], {}):
                out.print(f"[bold]{key}[/]: {value}", highlight=False, soft_wrap=True)
    if report.problem is not None:
        raise typer.Exit(EXIT_FAILED)


@app.command("doctor")
def doctor(
    typer_ctx: typer.Context,
    name: Annotated[
        str | None,
        typer.Argument(
            help="One agent; default: the configured, the example "
            "and the installed registry agents."
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON array.")] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds to wait for initialize (default: timeouts.agent_start_s).", min=0.1
        ),
    ] = None,
) -> None:
    """Start each agent and do a real ACP initialize: the time to its answer, its version
    and capabilities (loadSession, resume, fork, MCP over HTTP). Exit 1 when an agent
    checked is not usable, with the reason and the fix."""
    from control_plane.agents.doctor import doctor as check
    from control_plane.agents.doctor import names_to_check

    ctx: Context = typer_ctx.obj
    with errors_as_exit():
        config = ctx.config()
        names = [name] if name is not None else names_to_check(config)
        wait = timeout if timeout is not None else config.timeouts.agent_start_s
        reports = [check(n, config, wait) for n in names]
    if json_out:
        print_json([r.to_json() for r in reports])
    else:
        for report in reports:
            _print_report(report)
    raise typer.Exit(EXIT_OK if all(r.usable for r in reports) else EXIT_FAILED)


def _print_report(report: Any) -> None:
    mark = "[green]ok[/]" if report.usable else "[red]not usable[/]"
    out.print(f"[bold]{report.name}[/] {mark}", highlight=False)
    if report.command:
        out.print(f"  command: {' '.join(report.command)} ({report.source})", highlight=False,
                  soft_wrap=True)  # fmt: skip
    if report.installed_version or report.registry_version:
        out.print(
            f"  version: {report.installed_version or '?'} installed, "
            f"{report.registry_version or '-'} in the registry snapshot",
            highlight=False,
        )
    env = report.env
    if env.configured or env.passthrough_set or env.passthrough_unset:
        out.print(
            f"  env names: configured {env.configured}, forwarded and set "
            f"{env.passthrough_set}, forwarded but unset {env.passthrough_unset}",
            highlight=False,
        )
    shake = report.handshake
    if shake is not None:
        caps = [
            label
            for label, on in (
                ("loadSession", shake.load_session),
                ("resume", shake.resume),
                ("fork", shake.fork),
                ("mcp-http", shake.mcp_http),
            )
            if on
        ]
        out.print(
            f"  initialize: {shake.seconds:.2f} s, {shake.agent_name or '?'} "
            f"{shake.agent_version or ''}, protocol {shake.protocol_version}, "
            f"capabilities: {', '.join(caps) or 'none'}",
            highlight=False,
        )
    if report.problem:
        out.print(f"  problem: {report.problem}", highlight=False, soft_wrap=True)
        out.print(f"  fix: {report.fix}", highlight=False, soft_wrap=True)
