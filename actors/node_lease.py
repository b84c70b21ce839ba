"""This process's node lease: registered at start, renewed while it lives, given up at stop.

Renewed every third of the lease. On PostgreSQL (a fleet: other nodes judge this one by
its lease), two ways it ends while the process runs, both handled by ``on_lost`` (the
supervisor stops every session actor, which ends their agents):

- the renewal finds the lease already run out (the process stood still past it: SIGSTOP, a
  long pause; or the database was unreachable): other nodes may own its sessions now, and
  the fencing epoch refuses its writes. It registers a fresh lease and goes on with what
  discovery then finds;
- no renewal has succeeded for three quarters of the lease (the database unreachable): it
  stops its agents *before* the lease runs out by the others' clock, so no two nodes run one
  session's agent at once. Once a renewal succeeds again it goes on; if the lease ran out
  meanwhile, as above.

On SQLite the lease is kept for ``acpctl status`` only: every process is on one machine and
judged by ``/proc`` (store/queries/nodes.py), so losing the lease (a full disk for longer
than it, a pause) takes nothing away, and the node stops nothing; it registers again.

The other side of leases, ``release_dead_owners`` (called by the supervisor's sweep): the
sessions of owners found gone (their lease ran out, their process left this host) are
given up, idle ones included, so no session stays owned by a dead process until a prompt
comes for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from actors import telemetry
from protocol.os_thread_name import name_this_thread
from state_machines import ControlPlaneError
from store import Store
from store.location import Backend
from store.ops import nodes as node_ops
from store.ops.nodes import NodeSpec
from store.ops.recovery import DeadOwnersReleased, release_dead_owners
from store.queries.nodes import dead_owners

log = logging.getLogger(__name__)

# Stop our agents once this fraction of the lease has gone by without a renewal.
SELF_FENCE_AT = 0.75


class NodeLease:
    def __init__(
        self,
        store: Store,
        node: NodeSpec,
        lease_s: float,
        running: Callable[[], int],
        on_lost: Callable[[str], None],
    ) -> None:
        self.store = store
        self.node = node
        self.lease_s = lease_s
        self._running = running
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="node-lease", daemon=True)
        self._renewed_at = 0.0  # monotonic, last successful register or renewal
        self._fenced = False
        self._registered = False
        # Whether others judge this node by its lease (store/queries/nodes.py).
        self._fences = store.backend is Backend.POSTGRESQL
        self.losses = 0  # times the lease was lost or given up for safety (tests, status)

    def start(self) -> None:
        """Register and start renewing. A store that refuses the write now (a full disk, a
        lock held) does not keep the process from opening: the renewals register it once
        the store takes writes (until then no lease names it, and its sessions are judged
        by /proc, or alive on another host: never taken from it)."""
        self._renewed_at = time.monotonic()
        try:
            self.store.write(lambda ctx: node_ops.register(ctx, self.node, self.lease_s))
            self._registered = True
        except ControlPlaneError as exc:
            log.warning(
                "node %s: registering failed, retried at each renewal: %s", self.node.id, exc
            )
        self._thread.start()

    def stop(self) -> None:
        """Give the lease up (after the supervisor released its sessions)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        try:
            self.store.write(lambda ctx: node_ops.leave(ctx, self.node.id))
        except ControlPlaneError as exc:  # the lease runs out on its own
            log.warning("node %s: giving up the lease failed: %s", self.node.id, exc)

    def _run(self) -> None:
        name_this_thread()
        interval = self.lease_s / 3
        while not self._stop.wait(interval):
            self.renew_once()

    def renew_once(self) -> None:
        if not self._registered:
            try:
                self.store.write(lambda ctx: node_ops.register(ctx, self.node, self.lease_s))
            except ControlPlaneError as exc:
                log.warning("node %s: registering failed: %s", self.node.id, exc)
                return
            self._registered = True
            self._renewed_at = time.monotonic()
            return
        try:
            ends = self.store.write(
                lambda ctx: node_ops.renew(ctx, self.node.id, self.lease_s, self._running()),
                timeout=self.lease_s / 3,
            )
        except (ControlPlaneError, TimeoutError) as exc:
            silent_for = time.monotonic() - self._renewed_at
            log.warning(
                "node %s: lease renewal failed (%.1f s without): %s", self.node.id, silent_for, exc
            )
            if self._fences and not self._fenced and silent_for >= self.lease_s * SELF_FENCE_AT:
                self._fenced = True
                self.losses += 1
                self._on_lost("the database was unreachable for most of the lease")
            return
        if ends is None:
            self.losses += 1
            if self._fences and not self._fenced:
                self._on_lost("the lease had run out: other nodes may own its sessions")
            try:
                self.store.write(lambda ctx: node_ops.register(ctx, self.node, self.lease_s))
            except ControlPlaneError as exc:
                log.warning("node %s: registering again failed: %s", self.node.id, exc)
                return
            log.warning("node %s: lease lost and taken anew", self.node.id)
        self._renewed_at = time.monotonic()
        self._fenced = False

    def release_dead_owners(self) -> DeadOwnersReleased:
        """Give up the sessions of owners that are gone (store/ops/recovery.py): checked on a
        reader first, written only when some owner is gone. A store that refuses it now is
        tried again at the next sweep."""
        me = self.node.id
        try:
            if not self.store.read(lambda c: dead_owners(c, me)):
                return DeadOwnersReleased()
            released = self.store.write(lambda ctx: release_dead_owners(ctx, me))
        except ControlPlaneError as exc:
            log.warning("node %s: releasing the sessions of dead owners failed: %s", me, exc)
            return DeadOwnersReleased()
        telemetry.recovered(released.recovery)
        if released.sessions:
            log.warning(
                "node %s: %d sessions of gone owners %s released (%s)",
                me,
                len(released.sessions),
                ", ".join(released.owners),
                released.recovery,
            )
        return released
