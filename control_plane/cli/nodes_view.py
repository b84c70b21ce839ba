"""How ``acpctl status`` shows the store's nodes: each live one with its lease and load, and
the sessions that wait because no live node may run them (their placement)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from control_plane.cli.common import out
from store.queries import NodeRecord


def node_json(node: NodeRecord, now: float) -> dict[str, Any]:
    return {
        "id": node.id,
        "name": node.name,
        "host": node.host,
        "labels": list(node.labels),
        "capacity": node.capacity,
        "runningTurns": node.running,
        "live": node.live_at(now),
        # Seconds by the database's clock: negative once the lease has run out.
        "leaseLeftS": round(node.lease_until - now, 1),
        "heartbeatAgoS": round(now - node.heartbeat_at, 1),
    }


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
