"""How ``acpctl status`` shows the store's nodes (``NodeRecord.to_json``): each with its
lease and load, and the sessions that wait because no live node may run them."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from control_plane.cli.common import out


def print_nodes(nodes: list[dict[str, Any]], waiting: list[dict[str, str]]) -> None:
    if nodes:
        table = Table("node", "host", "labels", "turns", "lease left", "state")
        for n in nodes:
            table.add_row(
                n["name"],
                n["host"],
                ",".join(n["labels"]) or "-",
                f"{n['runningTurns']}/{n['capacity']}",
                f"{n['leaseLeftS']:.1f} s",
                "live" if n["live"] else "lease ran out",
            )
        out.print(table)
    for entry in waiting:
        out.print(
            f"waiting: session {entry['session']} may only run on {entry['placement']}, "
            "and no live node is that",
            highlight=False,
        )
