"""The session actor's side of claim offers (``actors/session/claim_offer.py``): publish an
offer when idle, and start (or put back) what a prompt's write claimed for it.

A mixin of ``SessionActor``: every method runs on the actor's thread."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TypeVar

from actors.session.claim_offer import ActorOffer, ClaimTerms
from actors.session.deps import ActorDeps
from protocol.agent.connection import AgentConnection
from state_machines import ControlPlaneError
from store import CommandKind, CommandRecord, SessionRecord
from store.ops import turns
from store.ops.interrupted import RestartTerms
from store.writer import WriteContext

T = TypeVar("T")


class ClaimedTurns:
    # What the mixin reads of the actor (set in SessionActor.__init__ and on_start).
    session_id: str
    deps: ActorDeps
    epoch: int
    conn: AgentConnection | None
    facts: SessionRecord
    turn: tuple[str, ...] | None
    closing: bool
    stop_asked: bool
    restart: RestartTerms
    offer: ActorOffer

    # ... and the SessionActor methods it calls.
    def _continue(self) -> None:
        raise NotImplementedError

    def _start_turn(self, claimed: list[CommandRecord]) -> None:
        raise NotImplementedError

    def _run_control(self, command: CommandRecord) -> None:
        raise NotImplementedError

    def _write(self, fn: Callable[[WriteContext], T]) -> T:
        raise NotImplementedError

    def _offer_if_idle(self) -> None:
        """Idle with the agent up: the next prompt's write may claim it for this actor."""
        if (
            self.turn is not None
            or self.closing
            or self.stop_asked
            or self.epoch < 0
            or self.conn is None
            or not self.conn.alive
            or self.deps.stopping.is_set()
            or self.facts.metadata.get("mode") == "run"  # one turn, then closed
        ):
            return
        cap = self.deps.settings.max_running_children if self.facts.parent_id else None
        collect = self.facts.queue_mode == "collect"
        self.offer.publish(ClaimTerms(self.epoch, collect, cap, self.restart))

    def _settle_offer(self) -> bool:
        """Before any message: close the offer; start what a prompt's write claimed with it.
        True if a claimed turn started."""
        claimed = self.offer.settle()
        if not claimed:
            return False
        startable = self.conn is not None and self.conn.alive and not self.closing
        if not startable or self.stop_asked or self.deps.stopping.is_set():
            self._return_claimed(claimed, "the session's agent could not start it")
            self._continue()
            return False
        self.offer.done(started=True)
        if claimed[0].kind is CommandKind.PROMPT:
            self._start_turn(claimed)
            return True
        self._run_control(claimed[0])
        self._continue()
        return False

    def _return_claimed(self, claimed: list[CommandRecord], why: str) -> None:
        """Put claimed commands back in the queue, unsent. Fenced: under a stale epoch they
        are the new owner's (its recovery handles a ``running`` session)."""
        if not claimed:
            return
        self.offer.done(started=False)
        if self.epoch < 0:
            return
        sid, epoch = self.session_id, self.epoch
        with contextlib.suppress(ControlPlaneError):
            self._write(lambda ctx: turns.unclaim(ctx, sid, epoch, claimed, why))
