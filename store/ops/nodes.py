"""A node's lease: registered when a control-plane process starts, renewed while it lives,
given up when it stops. See store/queries/nodes.py for how liveness is judged from it."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass

from sqlalchemy import delete, select, update

from store.dialect_sql import db_now, upsert
from store.schema import nodes, sessions
from store.writer import WriteContext

# A node whose lease ended this long ago is forgotten (its row deleted).
FORGET_AFTER_S = 3600.0


@dataclass(frozen=True)
class NodeSpec:
    id: str  # this process's owner id (store/ownership.py)
    name: str  # stable across restarts: what placement names
    labels: tuple[str, ...]
    capacity: int


def register(ctx: WriteContext, node: NodeSpec, lease_s: float) -> float:
    """Insert or refresh this node's row with a new lease; returns when the lease ends (the
    database's clock)."""
    now = db_now(ctx.conn)
    values = {
        "name": node.name,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "labels": json.dumps(sorted(node.labels)),
        "capacity": node.capacity,
        "running": 0,
        "heartbeat_at": now,
        "lease_until": now + lease_s,
        "stopped_at": None,
    }
    statement = upsert(ctx.conn, nodes).values(id=node.id, started_at=now, **values)
    ctx.conn.execute(statement.on_conflict_do_update(index_elements=["id"], set_=values))
    # Rows of nodes long gone go, unless a session still names one as its owner: without
    # its row, that owner would be judged by /proc alone (alive, on another host).
    ctx.conn.execute(
        delete(nodes).where(
            nodes.c.lease_until < now - FORGET_AFTER_S,
            nodes.c.id.not_in(select(sessions.c.owner).where(sessions.c.owner.is_not(None))),
        )
    )
    return now + lease_s


def renew(ctx: WriteContext, node_id: str, lease_s: float, running: int) -> float | None:
    """Extend the lease, only if it has not run out (nor was given up): then another node
    may have taken this one's sessions, and renewing would hide that. Returns the new end,
    or None: the lease was lost, and the caller must stop every session it runs."""
    now = db_now(ctx.conn)
    done = ctx.conn.execute(
        update(nodes)
        .where(nodes.c.id == node_id, nodes.c.lease_until > now, nodes.c.stopped_at.is_(None))
        .values(heartbeat_at=now, lease_until=now + lease_s, running=running)
    )
    return now + lease_s if done.rowcount == 1 else None


def leave(ctx: WriteContext, node_id: str) -> None:
    """An orderly stop: the lease ends now (the node released its sessions already)."""
    now = db_now(ctx.conn)
    ctx.conn.execute(
        update(nodes).where(nodes.c.id == node_id).values(stopped_at=now, lease_until=now)
    )
