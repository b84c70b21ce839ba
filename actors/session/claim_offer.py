"""Claim offers: a live idle session's next prompt is claimed in the transaction that queues it.

Without an offer a prompt costs two commits and the hand-offs between them: the enqueue's
commit (the store's writer thread) wakes the actor, the actor reads the queue and submits its
claim (the writer thread again), and only that commit starts the turn. With an offer, the
prompt's own write claims it (``turns.claim_submitted``: the same ``begin_next`` the actor
runs, on the same guards) and its commit hands the claimed commands to the actor, which
starts the turn at once.

A named choice: only a **live idle owner** offers (its agent up, no turn, not closing, this
process not stopping). The first prompt of a session, a session whose agent is not running,
a prompt that cancels the running turn (``steer``, ``interrupt``) and every prompt that
finds no free turn slot take the path they always took. The write takes an offer only with a
turn slot in hand (``TurnSlots.take_if_free``, never queued for one): the turn it claims
must be runnable at once.

The offer's states are ``state_machines/claim_offer.py``. Threads: ``take`` runs inside the
prompt's write and ``resolve`` after its commit (or failure), both on the writer thread;
``settle`` on the actor's thread before it handles any message (and in ``on_stop``), so an
actor never claims, passivates or stops with a claim of its own session in flight. The one
exception is the sweep's tick: it only reads unless it acts, and settles before it passivates
(``noticing.py``), so the offer stays open through it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from actors.slots import TurnSlots
from actors.telemetry import CLAIM_OFFERS
from state_machines import CommandState
from state_machines.claim_offer import OFFER_MACHINE, OfferEvent, OfferState
from store import CommandRecord
from store.ops import turns
from store.ops.interrupted import RestartTerms
from store.writer import WriteContext

log = logging.getLogger(__name__)

# How long an actor whose process is shutting down waits for a prompt's write that took its
# offer: the write ends (commits or fails) within the store's lock timeout; past this, the
# shutdown goes on and recovery finishes whatever that write claimed.
_SHUTDOWN_WAIT_S = 30.0


@dataclass(frozen=True)
class ClaimTerms:
    """What the actor would claim with (``turns.begin_next``'s arguments)."""

    epoch: int
    collect: bool
    max_running_children: int | None
    restart: RestartTerms


class ClaimOffer:
    """One offer, used once."""

    def __init__(self, session_id: str, terms: ClaimTerms) -> None:
        self.session_id = session_id
        self.terms = terms
        self._cond = threading.Condition()
        self._state = OfferState.OPEN
        self._claimed: list[CommandRecord] = []

    @property
    def state(self) -> OfferState:
        with self._cond:
            return self._state

    def _move(self, event: OfferEvent) -> None:  # under the condition's lock
        self._state = OFFER_MACHINE.next_state(self._state, event, self.session_id)

    def take(self, slots: TurnSlots) -> bool:
        """The prompt's write takes the offer, with a turn slot (writer thread)."""
        with self._cond:
            if self._state is not OfferState.OPEN or not slots.take_if_free(self.session_id):
                return False
            self._move(OfferEvent.TAKE)
            return True

    def resolve(self, claimed: list[CommandRecord]) -> None:
        """The write that took the offer committed with ``claimed`` (empty: it claimed
        nothing, or failed). Writer thread, after the commit."""
        with self._cond:
            if claimed:
                self._claimed = claimed
                self._move(OfferEvent.CLAIM)
            else:
                self._move(OfferEvent.DECLINE)
            self._cond.notify_all()
        CLAIM_OFFERS.labels("claimed" if claimed else "declined").inc()

    def settle(self, halt: threading.Event) -> list[CommandRecord]:
        """Close the offer (actor thread): withdrawn if nobody took it; if a write took it,
        wait for that write's outcome. Returns the commands claimed for this actor to start
        (then ``started`` or ``returned``), or nothing."""
        with self._cond:
            if self._state is OfferState.OPEN:
                self._move(OfferEvent.WITHDRAW)
                return []
            since = time.monotonic()
            while self._state is OfferState.TAKEN:
                self._cond.wait(1.0)
                if halt.is_set() and time.monotonic() - since > _SHUTDOWN_WAIT_S:
                    log.warning(
                        "session %s: a prompt's claim still in flight at shutdown; recovery "
                        "finishes it",
                        self.session_id,
                    )
                    return []
            return list(self._claimed) if self._state is OfferState.CLAIMED else []

    def started(self) -> None:
        with self._cond:
            self._move(OfferEvent.START)

    def returned(self) -> None:
        with self._cond:
            self._move(OfferEvent.RETURN)
        CLAIM_OFFERS.labels("returned").inc()


class ClaimOffers:
    """The open offers of this process's sessions, by session id (any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, ClaimOffer] = {}

    def publish(self, offer: ClaimOffer) -> None:
        with self._lock:
            self._open[offer.session_id] = offer

    def forget(self, offer: ClaimOffer) -> None:
        with self._lock:
            if self._open.get(offer.session_id) is offer:
                del self._open[offer.session_id]

    def take(self, session_id: str, slots: TurnSlots) -> ClaimOffer | None:
        """The session's open offer, taken (with a turn slot), or None. An offer found with
        no free slot is left to its actor (it withdraws it at its next message)."""
        with self._lock:
            offer = self._open.pop(session_id, None)
        if offer is None or not offer.take(slots):
            return None
        return offer

    def offered(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._open


class PromptClaim:
    """One prompt's write that also claims it when the session's actor offers (one per
    ``ControlPlane.submit_prompt``). A write can run more than once (a group run again with
    savepoints, a lock retry): the offer is taken once, by the first run, and kept."""

    def __init__(
        self,
        offers: ClaimOffers,
        slots: TurnSlots,
        session_id: str,
        enqueue: Callable[[WriteContext], tuple[CommandRecord, bool]],
    ) -> None:
        self._offers = offers
        self._slots = slots
        self.session_id = session_id
        self._enqueue = enqueue
        self._asked = False
        self.offer: ClaimOffer | None = None

    def write(self, ctx: WriteContext) -> tuple[CommandRecord, bool, list[CommandRecord]]:
        """The enqueue's ``(command, cancel_running)`` and the commands claimed with it."""
        command, cancel_running = self._enqueue(ctx)
        if cancel_running or command.state is not CommandState.QUEUED:
            return command, cancel_running, []
        if not self._asked:
            self._asked = True
            self.offer = self._offers.take(self.session_id, self._slots)
        offer = self.offer
        if offer is None:
            return command, False, []
        terms = offer.terms
        ok, value = ctx.isolated(
            lambda c: turns.claim_submitted(
                c,
                self.session_id,
                command.id,
                terms.epoch,
                terms.collect,
                terms.max_running_children,
                terms.restart,
            )
        )
        if not ok:  # the enqueue stands; the actor claims as after any enqueue
            log.warning("session %s: claiming with the enqueue failed: %s", self.session_id, value)
            return command, False, []
        assert isinstance(value, list)
        return command, False, value

    def resolve(self, claimed: list[CommandRecord]) -> bool:
        """After the write's commit or failure (writer thread): hand the outcome to the
        offer it took. True if it took one (its actor must be told either way: to start
        the claimed turn, or to give back the slot the offer held)."""
        if self.offer is None:
            return False
        self.offer.resolve(claimed)
        return True


class ActorOffer:
    """The actor's side: at most one offer of its own at a time (actor thread only)."""

    def __init__(self, offers: ClaimOffers, session_id: str, halt: threading.Event) -> None:
        self._offers = offers
        self._session_id = session_id
        self._halt = halt
        self._current: ClaimOffer | None = None

    @property
    def has_offer(self) -> bool:
        return self._current is not None

    def publish(self, terms: ClaimTerms) -> None:
        if self._current is None:
            self._current = ClaimOffer(self._session_id, terms)
            self._offers.publish(self._current)

    def settle(self) -> list[CommandRecord]:
        """Close the current offer; what it claimed, for the actor to start or return."""
        offer = self._current
        if offer is None:
            return []
        self._offers.forget(offer)
        claimed = offer.settle(self._halt)
        if not claimed:
            self._current = None
        return claimed

    def done(self, started: bool) -> None:
        """The claimed commands were started (or put back in the queue, unsent)."""
        offer, self._current = self._current, None
        if offer is not None:
            offer.started() if started else offer.returned()
