"""Discovery: the sessions with work that no live process owns, queued for a turn slot here.

On PostgreSQL the work is first *claimed* up to the free turn slots, in one transaction
(``SKIP LOCKED``: nodes discovering together take different sessions; store/ops/claims.py);
the rest goes the SQLite way: queued for a slot, and the actor's activation takes ownership
(a session another node took meanwhile is left to it). A session this process already runs
is told to look again (``Wake``): e.g. a command another process queued for it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import pykka

from actors.session.messages import Wake
from actors.slots import TurnSlots
from state_machines import ControlPlaneError
from store import Store, queries
from store.location import Backend
from store.ops import claims
from store.ops.nodes import NodeSpec

if TYPE_CHECKING:
    from actors.session.actor import SessionActor

log = logging.getLogger(__name__)

LiveActor = Callable[[str], "pykka.ActorRef[SessionActor] | None"]


def find_work(store: Store, me: str, node: NodeSpec, slots: TurnSlots, live: LiveActor) -> None:
    free = slots.limit - slots.running - slots.waiting
    if store.backend is Backend.POSTGRESQL and free > 0:
        try:
            claimed = store.write(
                lambda ctx: claims.claim_sessions(ctx, me, node.name, node.labels, free)
            )
        except ControlPlaneError as exc:  # the read below still finds the work
            log.warning("claiming work failed: %s", exc)
            claimed = []
        for session_id in claimed:
            slots.request(session_id)
    with_work = store.read(lambda c: queries.sessions_with_work(c, me, node.name, node.labels))
    for session_id in with_work:
        ref = live(session_id)
        if ref is None:
            slots.request(session_id)
        else:
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(Wake())
