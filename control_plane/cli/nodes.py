"""``acpctl nodes list``, and the ``--node-name`` / ``--label`` flags of the commands that run
a node (``serve``, ``batch``).

Every process that runs sessions is a node of its store, with a row in ``nodes``: its lease,
its load and what it offers placement (docs/scaling.md, "Node names and labels"). The flags
override ``[node] name`` and ``labels`` of the configuration (flags win, as everywhere):
``--label`` given once or more replaces the configured labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from control_plane.cli.common import (
    Context,
    errors_as_exit,
    fail,
    opened_store,
    out,
    print_json,
)

if TYPE_CHECKING:
    from control_plane.config import Config

NodeNameOption = Annotated[
    str | None,
    typer.Option(
        "--node-name",
        metavar="NAME",
        help="This node's name, what placement names (default: [node] name, else the host "
        "name). Letters, digits, '.', '_', '-'.",
    ),
]
LabelOption = Annotated[
    list[str] | None,
    typer.Option(
        "--label",
        metavar="LABEL",
        help="A label this node offers placement: WORD or KEY=VALUE (e.g. zone=eu-1); "
        "repeat for more. Replaces [node] labels.",
    ),
]


@dataclass
class NodeContext(Context):
    """A ``Context`` whose configuration carries the node flags (checked already)."""

    node_name: str | None = None
    node_labels: tuple[str, ...] | None = None

    def config(self) -> Config:
        config = super().config()
        update: dict[str, Any] = {}
        if self.node_name is not None:
            update["name"] = self.node_name
        if self.node_labels is not None:
            update["labels"] = list(self.node_labels)
        if not update:
            return config
        return config.model_copy(update={"node": config.node.model_copy(update=update)})


def with_node(ctx: Context, name: str | None, labels: list[str] | None) -> NodeContext:
    """``ctx`` with the node flags, checked before anything starts: a bad name or label
    (``InvalidNodeName``, ``InvalidLabel``) exits 2 with what is wrong, having loaded
    nothing (no store, no SDK, no agent)."""
    from state_machines.node_labels import (
        InvalidLabel,
        InvalidNodeName,
        check_node_labels,
        check_node_name,
    )

    try:
        checked_name = None if name is None else check_node_name(name)
    except InvalidNodeName as exc:
        fail(f"--node-name: {exc}")
    try:
        checked_labels = None if not labels else check_node_labels(labels)
    except InvalidLabel as exc:
        fail(f"--label: {exc}")
    return NodeContext(
        config_path=ctx.config_path,
        db=ctx.db,
        log_format=ctx.log_format,
        node_name=checked_name,
        node_labels=checked_labels,
    )


app = typer.Typer(help="The store's nodes: the processes that run sessions.", no_args_is_help=True)

SQLITE_NOTE = (
    "a SQLite store has no fleet: every node here is a process on this machine, judged "
    "alive by /proc; leases decide nothing (nodes take over each other's sessions on "
    "PostgreSQL: docs/scaling.md)"
)


@app.command("list")
def list_command(
    typer_ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
) -> None:
    """Every node the store keeps: name, host, pid, labels, lease left (or how long ago it
    ran out), running turns against capacity, when it started and last renewed. Stopped
    nodes stay listed for an hour.

    Example: acpctl --db postgresql://acpctl@db/acpctl nodes list
    """
    ctx: Context = typer_ctx.obj
    with errors_as_exit(), opened_store(ctx) as store:
        from store.location import Backend
        from store.queries.nodes import node_list

        views = store.read(node_list)
        backend = store.backend
        path = store.path
    report = {
        "store": path,
        "backend": backend.value,
        # Whether the leases below decide who may own a session (PostgreSQL), or only say
        # what ran (SQLite: /proc decides).
        "leasesDecide": backend is Backend.POSTGRESQL,
        "nodes": views,
    }
    if json_out:
        print_json(report)
        return
    from control_plane.cli.nodes_view import print_node_table

    if backend is not Backend.POSTGRESQL:
        out.print(f"note: {SQLITE_NOTE}", highlight=False)
    if not views:
        out.print("no nodes: no process has run sessions on this store in the last hour")
        return
    print_node_table(views)
