"""How ``acpctl status`` and ``acpctl nodes list`` show the store's nodes
(``NodeRecord.to_json``): each with its lease and load, and (status) the sessions that wait
because no live node may run them."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from control_plane.cli.common import out


def _lease(node: dict[str, Any]) -> str:
    """What the lease says: time left, how long ago it ran out, or an orderly stop."""
    left = float(node["leaseLeftS"])
    if node["state"] == "stopped":
        return "stopped"
    if left > 0:
        return f"{left:.1f} s left"
    return f"expired {-left:.1f} s ago"


def print_node_table(nodes: list[dict[str, Any]]) -> None:
    table = Table("node", "host", "pid", "labels", "turns", "lease", "started (UTC)", "heartbeat")
    for column in table.columns:  # on a narrow terminal the labels and the date wrap
        column.no_wrap = column.header not in ("labels", "started (UTC)")
    table.columns[3].min_width = 10
    table.columns[6].overflow = "fold"
    for n in nodes:
        table.add_row(
            n["name"],
            n["host"],
            str(n["pid"]),
            "\n".join(n["labels"]) or "-",  # one a line: long label sets stay readable
            f"{n['runningTurns']}/{n['capacity']}",
            _lease(n),
            # 2026-12-07T12:16:20+00:00 -> 2026-12-07 12:16:20
            n["startedAt"].replace("T", " ").removesuffix("+00:00"),
            f"{n['heartbeatAgoS']:.1f} s ago",
        )
    out.print(table)


def print_nodes(nodes: list[dict[str, Any]], waiting: list[dict[str, str]]) -> None:
    if nodes:
        print_node_table(nodes)
    for entry in waiting:
        out.print(
            f"waiting: session {entry['session']} may only run on {entry['placement']}, "
            "and no live node is that",
            highlight=False,
        )
