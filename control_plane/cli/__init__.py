"""``acpctl``: the command line of the control plane (typer + rich).

Conventions: ``--help`` with examples everywhere, ``--json`` on read commands, colour and
progress only on a TTY (``NO_COLOR`` honoured), exit 0 success / 1 work failed / 2 usage or
input error, ``--db`` / ``ACPCTL_DB`` pick the store.

Start-up: importing this module must stay cheap (``--help`` and usage errors run nothing
else), so the SDK, the store and the runtime are imported inside the commands that use them
and option types stay light; ``tests/integration/test_cli.py`` pins which modules must not load.
"""

from __future__ import annotations

import os
from enum import StrEnum
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from control_plane.cli import agents as cli_agents
from control_plane.cli import batch as cli_batch
from control_plane.cli import gc as cli_gc
from control_plane.cli import nodes as cli_nodes
from control_plane.cli import notify as cli_notify
from control_plane.cli import search as cli_search
from control_plane.cli import sessions as cli_sessions
from control_plane.cli import tokens as cli_tokens
from control_plane.cli import workspaces as cli_workspaces
from control_plane.cli.common import Context, errors_as_exit, out, print_json

GLOBAL_OPTIONS = ("--db", "--config")


def hoist_global_options(args: list[str]) -> list[str]:
    """``--db X`` and ``--config X`` are the top-level command's options; people also type
    them after the subcommand (``acpctl serve --db X``). Moved to the front, they mean the
    same in either place. Nothing after a ``--`` is touched."""
    hoisted: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        name = arg.split("=", 1)[0]
        if name in GLOBAL_OPTIONS and "=" in arg:
            hoisted.append(arg)
        elif arg in GLOBAL_OPTIONS and i + 1 < len(args):
            hoisted.extend(args[i : i + 2])
            i += 1
        else:
            rest.append(arg)
        i += 1
    return hoisted + rest


class _Group(TyperGroup):
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist_global_options(args))


app = typer.Typer(
    name="acpctl",
    cls=_Group,
    help="Durable sessions for coding agents over the Agent Client Protocol.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
config_app = typer.Typer(help="Show the effective configuration.", no_args_is_help=True)
app.add_typer(cli_sessions.app, name="sessions")
app.add_typer(config_app, name="config")
app.add_typer(cli_tokens.app, name="tokens")
app.add_typer(cli_agents.app, name="agents")
app.add_typer(cli_workspaces.app, name="workspaces")
app.add_typer(cli_notify.app, name="notify")
app.add_typer(cli_nodes.app, name="nodes")


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


@app.callback()
def _global(
    typer_ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option("--db", help="Store file (default: ACPCTL_DB or the user data dir)."),
    ] = None,
    config: Annotated[
        str | None, typer.Option("--config", help="TOML config file (default: ACPCTL_CONFIG).")
    ] = None,
    log_format: Annotated[
        LogFormat | None,
        typer.Option("--log-format", help="Logs on stderr: text, or json (one object a line)."),
    ] = None,
) -> None:
    typer_ctx.obj = Context(
        config_path=config, db=db, log_format=None if log_format is None else log_format.value
    )


app.command("batch")(cli_batch.batch_command)
app.command("demo")(cli_batch.demo_command)
app.command("events")(cli_sessions.events_command)
app.command("gc")(cli_gc.gc_command)
app.command("status")(cli_sessions.status_command)
app.command("search")(cli_search.search_command)


@config_app.command("show")
def config_show(
    typer_ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print the effective configuration (file + environment + flags); secrets hidden."""
    from control_plane.config import redacted

    ctx: Context = typer_ctx.obj
    with errors_as_exit():
        effective = redacted(ctx.config())
    if json_out:
        print_json(effective)
    else:
        for key, value in effective.items():
            out.print(f"{key} = {value!r}", highlight=False)


@app.command("serve")
def serve_command(
    typer_ctx: typer.Context,
    agent: Annotated[
        str | None,
        typer.Option("--agent", help="Backend agent: command, configured name, or 'example'."),
    ] = None,
    max_frame_bytes: Annotated[int, typer.Option(help="Largest accepted client frame.")] = 8
    * 1024
    * 1024,
    metrics: Annotated[
        str | None,
        typer.Option("--metrics", help="Serve Prometheus metrics at HOST:PORT/metrics."),
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen",
            help="Serve ACP over the network at HOST:PORT (/acp: WebSocket and Streamable "
            "HTTP; tokens from 'acpctl tokens create'). Default: stdio.",
        ),
    ] = None,
    cert: Annotated[str | None, typer.Option(help="TLS certificate (PEM) for --listen.")] = None,
    key: Annotated[str | None, typer.Option(help="TLS private key (PEM) for --listen.")] = None,
    insecure_no_tls: Annotated[
        bool,
        typer.Option(
            "--insecure-no-tls", help="Allow --listen beyond loopback without TLS (unsafe)."
        ),
    ] = False,
    grace: Annotated[
        float, typer.Option(help="On SIGTERM, seconds running turns get to finish.")
    ] = 30.0,
    send_buffer_bytes: Annotated[
        int, typer.Option(help="--listen: unread bytes a client may owe before it is cut off.")
    ] = 16 * 1024 * 1024,
    max_connections: Annotated[
        int, typer.Option(help="--listen: open client connections at most (then 503).")
    ] = 1000,
    node_name: cli_nodes.NodeNameOption = None,
    label: cli_nodes.LabelOption = None,
) -> None:
    """Be an ACP agent on stdio (or, with --listen, on the network) in front of any ACP
    agent: durable, resumable sessions for any ACP client (editors, headless clients,
    remote clients). Logs go to stderr.

    Example (Zed settings.json, "agent_servers"):
      {"Durable Claude": {"command": "acpctl",
        "args": ["serve", "--agent", "claude"]}}

    Example (network): acpctl tokens create laptop; acpctl serve --listen 127.0.0.1:8787

    Example (a fleet node): acpctl --db postgresql://acpctl@db/acpctl serve --listen
    0.0.0.0:8787 --cert c.pem --key k.pem --node-name build-1 --label zone=eu-1
    """
    ctx = cli_nodes.with_node(typer_ctx.obj, node_name, label)  # bad: exit 2, nothing loaded
    import asyncio

    from control_plane.prestart import prestart_agent

    with errors_as_exit():
        from control_plane.metrics import parse_address

        metrics_at = None if metrics is None else parse_address(metrics)
        config = ctx.config()
        spec, _ = config.agent(agent)
        if listen is not None:
            from pathlib import Path

            from control_plane.remote.hub import Limits
            from control_plane.remote.run import ListenOptions, check_listen, serve_listen

            host, port = parse_address(listen, "--listen")
            options = ListenOptions(
                host,
                port,
                cert=None if cert is None else Path(cert),
                key=None if key is None else Path(key),
                insecure=insecure_no_tls,
                grace_s=grace,
                limits=Limits(
                    max_frame_bytes=max_frame_bytes,
                    max_buffer_bytes=send_buffer_bytes,
                    max_connections=max_connections,
                ),
            )
            check_listen(options)
            code = asyncio.run(serve_listen(config, spec, options, None, metrics_at))
        else:
            # The backend agent starts now, while serve imports the SDK and opens the
            # store: the editor's first session/new then finds it ready
            # (protocol/agent/prestart.py).
            backend = prestart_agent(config, spec, os.getcwd(), "serve")
            from control_plane.serve.run import serve

            code = asyncio.run(serve(config, spec, max_frame_bytes, backend, metrics_at))
    if code:
        raise typer.Exit(code)


@app.command("attach")
def attach_command(
    url: Annotated[str, typer.Argument(help="The server's /acp URL (ws://, wss://, http(s)://).")],
    session: Annotated[str, typer.Argument(help="The session to attach to.")],
    token_file: Annotated[
        str | None,
        typer.Option(help="A file holding the access token (else ACPCTL_TOKEN)."),
    ] = None,
) -> None:
    """Watch a session of 'acpctl serve --listen' live from anywhere: its conversation so
    far, then every update as it happens. A line on stdin is a prompt; a number answers a
    pending permission request. Reconnects by itself, without repeating or losing output.

    Example: ACPCTL_TOKEN=$(cat ~/.acpctl-token) acpctl attach ws://devbox:8787/acp SESSION
    """
    import asyncio
    import os
    from pathlib import Path

    from control_plane.cli.common import fail

    token = (
        Path(token_file).read_text().strip()
        if token_file is not None
        else os.environ.get("ACPCTL_TOKEN", "")
    )
    if not token:
        fail("no token: set ACPCTL_TOKEN or pass --token-file (acpctl tokens create NAME)")
    from control_plane.remote.attach import AttachRefused, attach

    try:
        code = asyncio.run(attach(url, token, session))
    except AttachRefused as exc:
        fail(str(exc), code=1)
    except KeyboardInterrupt:
        code = 130
    if code:
        raise typer.Exit(code)


@app.command("example-agent")
def example_agent(
    args: Annotated[
        list[str] | None, typer.Argument(help="Flags for the agent (see --help of it).")
    ] = None,
) -> None:
    """Run the bundled example agent on stdio (an ACP agent; no network, deterministic)."""
    from protocol.example_agent import agent

    agent.main(args or [])


def main() -> None:
    # The commands that speak ACP import the SDK inside them; its schema models then read
    # their fields' docstrings once per file, not once per class, and a command that never
    # loads pydantic pays nothing (protocol/attribute_docstrings.py).
    from protocol.attribute_docstrings import install_on_import

    install_on_import()
    app()


if __name__ == "__main__":
    main()
