"""Whether a session's owner is alive, from node leases.

A node (one control-plane process) holds a lease in ``nodes`` that it renews while it
lives (actors/node_lease.py). Its owner id is dead when:

- its row says it stopped, or its lease has run out by the database's clock: it crashed,
  was partitioned from the database, or stood still (``SIGSTOP``, a long pause) past its
  lease. Its sessions may be taken over; the fencing epoch refuses its writes if it wakes;
- or, on this same host, its process is gone (found at once, without waiting for the
  lease: the ``/proc`` check of store/ownership.py).

An owner with no node row (a process of an earlier release, before leases) is judged by
``/proc`` alone, as before: dead if gone from this host, alive if on another host.

On a SQLite store every process is on this machine, and ``/proc`` answers exactly: there
the lease decides nothing (a process that stands still, or waits out a full disk, keeps its
sessions, as before leases). It is kept all the same, for ``acpctl status``.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, select

from state_machines import SessionState
from store.dialect_sql import db_now, is_postgres
from store.ownership import owner_alive
from store.schema import nodes, sessions

# Read through ix_sessions_state_updated: closed sessions (most of a long-lived store) are
# not scanned for their owners.
_OPEN_STATES = [s.value for s in SessionState if s is not SessionState.CLOSED]


@dataclass(frozen=True)
class NodeRecord:
    id: str
    name: str
    host: str
    pid: int
    labels: tuple[str, ...]
    capacity: int
    running: int
    started_at: float
    heartbeat_at: float
    lease_until: float
    stopped_at: float | None

    def live_at(self, now: float) -> bool:
        return self.stopped_at is None and self.lease_until > now

    def state_at(self, now: float) -> str:
        """``live``, ``lease expired`` (it stopped renewing: crashed, stood still, or lost
        the database) or ``stopped`` (an orderly stop)."""
        if self.stopped_at is not None:
            return "stopped"
        return "live" if self.lease_until > now else "lease expired"

    def to_json(self, now: float) -> dict[str, Any]:
        """What ``acpctl nodes list --json``, ``acpctl status --json`` and the console's
        status show (``now`` by the database's clock). Keys are kept stable; times are ISO
        8601 in UTC, ages in seconds."""
        return {
            "id": self.id,
            "name": self.name,
            "host": self.host,
            "pid": self.pid,
            "labels": list(self.labels),
            "capacity": self.capacity,
            "runningTurns": self.running,
            "live": self.live_at(now),
            "state": self.state_at(now),
            # Negative once the lease has run out.
            "leaseLeftS": round(self.lease_until - now, 1),
            "heartbeatAgoS": round(now - self.heartbeat_at, 1),
            "startedAt": _iso(self.started_at),
            "heartbeatAt": _iso(self.heartbeat_at),
            "stoppedAt": None if self.stopped_at is None else _iso(self.stopped_at),
        }


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="seconds")


def all_nodes(conn: Connection) -> list[NodeRecord]:
    rows = conn.execute(select(nodes).order_by(nodes.c.name, nodes.c.started_at)).all()
    return [
        NodeRecord(
            r.id,
            r.name,
            r.host,
            r.pid,
            tuple(json.loads(r.labels)),
            r.capacity,
            r.running,
            r.started_at,
            r.heartbeat_at,
            r.lease_until,
            r.stopped_at,
        )
        for r in rows
    ]


class Liveness:
    """Owner liveness for one read: the node rows are read once, on first need, and each
    distinct owner is judged once."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._by_lease = is_postgres(conn)
        self._leases: dict[str, tuple[str, bool]] | None = None  # id -> (host, live)
        self._judged: dict[str, bool] = {}
        self._host = socket.gethostname()

    def _load(self) -> dict[str, tuple[str, bool]]:
        if self._leases is None:
            now = db_now(self._conn)
            rows = self._conn.execute(
                select(nodes.c.id, nodes.c.host, nodes.c.lease_until, nodes.c.stopped_at)
            ).all()
            self._leases = {
                r.id: (r.host, r.stopped_at is None and r.lease_until > now) for r in rows
            }
        return self._leases

    def alive(self, owner: str | None) -> bool:
        if not owner:
            return False
        judged = self._judged.get(owner)
        if judged is None:
            lease = self._load().get(owner) if self._by_lease else None
            if lease is None:
                judged = owner_alive(owner)  # no lease recorded: the process check alone
            else:
                host, live = lease
                judged = live and (host != self._host or owner_alive(owner))
            self._judged[owner] = judged
        return judged

    def live_nodes(self) -> list[NodeRecord]:
        now = db_now(self._conn)
        return [n for n in all_nodes(self._conn) if n.live_at(now)]


def node_views(conn: Connection) -> list[dict[str, Any]]:
    """Every node that has not stopped, as ``NodeRecord.to_json`` shows it."""
    now = db_now(conn)
    return [n.to_json(now) for n in all_nodes(conn) if n.stopped_at is None]


def node_list(conn: Connection) -> list[dict[str, Any]]:
    """Every node row the store keeps, stopped ones included (a row is forgotten an hour
    after its lease ended: store/ops/nodes.py), as ``NodeRecord.to_json`` shows it."""
    now = db_now(conn)
    return [n.to_json(now) for n in all_nodes(conn)]


def dead_owners(conn: Connection, me: str) -> list[str]:
    """The owners of open sessions, other than ``me``, that are gone by ``Liveness``: a
    lease run out (PostgreSQL), a process gone from this host. One read of the open
    sessions' distinct owners (a handful: one per node) and of the node rows."""
    owners = conn.execute(
        select(sessions.c.owner)
        .where(
            sessions.c.state.in_(_OPEN_STATES),
            sessions.c.owner.is_not(None),
            sessions.c.owner != me,
        )
        .distinct()
    ).scalars()
    liveness = Liveness(conn)
    return sorted(owner for owner in owners if not liveness.alive(owner))
