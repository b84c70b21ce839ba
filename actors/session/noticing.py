"""What the session actor notices without being told: that it has been idle long enough to
passivate, and what other processes changed in the store (``acpctl sessions cancel|close``,
another node). A mixin of ``SessionActor``: every method runs on the actor's thread."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from actors.session.deps import ActorDeps
from protocol.agent.connection import AgentConnection
from state_machines import SessionState
from store import Store, queries

log = logging.getLogger(__name__)


class Noticing:
    # What the mixin reads of the actor (set in SessionActor.__init__).
    session_id: str
    store: Store
    deps: ActorDeps
    conn: AgentConnection | None
    turn: tuple[str, ...] | None
    closing: bool
    last_active: float

    # ... and the actor methods it calls (``stop`` is pykka's, declared only: a stub here
    # would stand before pykka's in the method order).
    stop: Callable[[], None]
    _settle_offer: Callable[[], bool]  # the claim-offer mixin's (claimed_turns.py)

    def _work(self) -> None:
        raise NotImplementedError

    def _call_quietly(self, coro: Any, timeout: float = 10) -> None:
        raise NotImplementedError

    def _tick(self, now: float, over_cap: bool) -> None:
        """The sweep's tick. It comes with the claim offer still open (``_dispatch``): it
        settles the offer before it passivates, and stopping settles it in ``on_stop``."""
        self._notice_other_processes()
        if self.closing:
            return
        idle_for = now - self.last_active
        if self.turn is None and (over_cap or idle_for >= self.deps.settings.passivate_after_s):
            if self._settle_offer():
                return  # a prompt's write claimed a turn meanwhile: not idle any more
            pending = self.store.read(lambda c: queries.next_queued(c, self.session_id))
            if pending is None:
                if over_cap:
                    log.info("passivating idle session %s: over max_live_agents", self.session_id)
                self.stop()  # passivate: on_stop ends the agent and releases ownership

    def _notice_other_processes(self, then_work: bool = False) -> None:
        """Another process (``acpctl sessions cancel|close``) can only change the store; the
        owner sees it here, once a sweep interval, and acts on the agent. ``then_work``:
        told at once by another node (``Noticed``), it also looks for new commands."""
        if self.closing:
            return
        state = self.store.get_session(self.session_id).state
        if state is SessionState.CLOSED:
            self.closing = True
            if self.turn is not None and self.conn is not None:
                self._call_quietly(self.conn.cancel())
            self.stop()
        elif state is SessionState.CANCELLING and self.turn is not None and self.conn is not None:
            self.deps.loop.submit(self.conn.cancel())
        if then_work and not self.closing:
            self._work()
