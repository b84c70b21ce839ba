"""A property test of the claim-offer race, on a real store (both backends): prompts queued
and claimed in one transaction for an idle owner, the owner's own claims, turn ends, returned
claims (the actor could not start them) and owners killed between a claim's commit and its
turn start, in any order hypothesis finds.

The session actor's two halves are played by the test, in one thread, with the real parts:
``PromptClaim`` (the prompt's write, as ``ControlPlane.submit_prompt`` runs it), ``ActorOffer``
and ``TurnSlots`` (the actor's side), and the store's operations. The window under test is
between a ``submit`` that claimed and the actor's next message (``actor_message``): anything
may happen there, a crash of the whole process included.

What must hold, after every step and at the end:
- the store's session is ``running`` exactly when the model has a turn started or a claim
  not yet started, and the turn slot is held exactly then (never leaked, never missing);
- every command's ``attempts`` counts its claims minus its returned claims: a claim that
  was put back unsent costs nothing; one a crash cut off counts, as any interrupted turn;
- nothing is lost or stuck: once a live owner works the queue off, every prompt has ended
  (completed, or failed when crashes used up its attempts), none is left queued or running.
"""

from __future__ import annotations

import itertools
import socket
import threading
from collections import Counter

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.session.claim_offer import ActorOffer, ClaimOffers, ClaimTerms, PromptClaim
from actors.slots import TurnSlots
from state_machines import CommandState, SessionState
from store import CommandRecord, Store, ops
from store.ops import turns
from store.ops.interrupted import KEPT_NOTHING
from tests.conftest import AGENT

# The PostgreSQL variants stay in the default run: the race is settled by
# each backend's locking.
pytestmark = pytest.mark.backend_specific

_owners = itertools.count()


class ClaimRace(RuleBasedStateMachine):
    store: Store  # set by the test (one store for every example; a session per example)

    def __init__(self) -> None:
        super().__init__()
        self.sid = self.store.spawn(AGENT, "/w").session.id
        self.claims: Counter[str] = Counter()  # per command: claims that counted
        self.sent: Counter[str] = Counter()  # per command: turns started with it
        self.commands: list[str] = []
        self._incarnation()

    def _incarnation(self) -> None:
        """A new process (after a crash): its own owner, slots and offers; its agent up."""
        # A pid that cannot exist on this host: the previous incarnation is dead.
        self.owner = f"{socket.gethostname()}:{99_000_000 + next(_owners)}:1"
        self.epoch = self.store.write(lambda ctx: ops.acquire(ctx, self.sid, self.owner))
        epoch = self.epoch
        # Its actor starts an agent (recovery left the session in ``error`` after a crash).
        if self.store.get_session(self.sid).state in (SessionState.CREATING, SessionState.ERROR):
            self.store.write(
                lambda ctx: turns.agent_started(ctx, self.sid, epoch, "acp", "new", {})
            )
        self.slots = TurnSlots(1, lambda _: None)
        self.offers = ClaimOffers()
        self.actor = ActorOffer(self.offers, self.sid, threading.Event())
        self.turn: tuple[str, ...] | None = None  # started
        # A prompt's write took the offer (and a slot with it) and claimed nothing: the slot
        # is the actor's to give back at its next message (the Wake that write told it).
        self.declined = False
        self._offer_if_idle()

    def _offer_if_idle(self) -> None:
        if self.turn is None:  # (a claimed offer stays the current one until settled)
            self.actor.publish(ClaimTerms(self.epoch, False, None, KEPT_NOTHING))

    def _count_claims(self, claimed: list[CommandRecord]) -> None:
        for command in claimed:
            self.claims[command.id] += 1

    # -- the prompt's write (ControlPlane.submit_prompt) ----------------------------------

    @rule()
    def submit(self) -> None:
        sid = self.sid
        payload = {"content": [{"type": "text", "text": f"p{len(self.commands)}"}]}
        claim = PromptClaim(
            self.offers,
            self.slots,
            sid,
            lambda ctx: ops.submit_prompt(ctx, sid, payload, None, None),
        )
        command, _, claimed = self.store.write(claim.write)
        if claim.resolve(claimed) and not claimed:
            self.declined = True
        self.commands.append(command.id)
        self._count_claims(claimed)

    # -- the actor's next message: settle the offer, then work as _work does ---------------

    @rule(agent_up=st.booleans())
    def actor_message(self, agent_up: bool) -> None:
        claimed = self.actor.settle()
        if claimed:
            if agent_up:
                self.actor.done(started=True)
                self._start(claimed)
            else:  # its agent died meanwhile: back to the queue, unsent
                self.actor.done(started=False)
                sid, epoch = self.sid, self.epoch
                self.store.write(lambda ctx: turns.unclaim(ctx, sid, epoch, claimed, "test"))
                for command in claimed:
                    self.claims[command.id] -= 1
                self.slots.release(sid)
        if self.turn is None:
            self._work()
        self.declined = False
        self._offer_if_idle()

    def _work(self) -> None:
        _, pending = self.store.session_work(self.sid)
        if not pending:
            self.slots.release(self.sid)
            return
        if not self.slots.try_take(self.sid):
            return
        sid, epoch = self.sid, self.epoch
        claimed = self.store.write(lambda ctx: turns.begin_next(ctx, sid, epoch, False))
        self._count_claims(claimed)
        if claimed:
            self._start(claimed)
        else:
            self.slots.release(sid)

    def _start(self, claimed: list[CommandRecord]) -> None:
        assert self.turn is None, "two turns at once"
        assert self.slots.holds(self.sid), "a turn started without its slot"
        self.turn = tuple(c.id for c in claimed)
        for command in claimed:
            self.sent[command.id] += 1

    @precondition(lambda self: self.turn is not None)
    @rule()
    def turn_ends(self) -> None:
        assert self.turn is not None
        sid, epoch, ids = self.sid, self.epoch, self.turn
        self.actor.settle()  # a message: the actor closes its offer first
        queued = self.store.write(
            lambda ctx: turns.finish_turn(
                ctx, sid, epoch, ids, {"stopReason": "end_turn"}, CommandState.COMPLETED, None
            )
        )
        assert queued == bool(self.store.session_work(sid)[1])
        self.turn = None
        self.slots.release(sid)
        self._offer_if_idle()

    @rule()
    def crash(self) -> None:
        """kill -9 of the whole process, anywhere (a claim not yet started included): the
        next process's acquire recovers what it left."""
        self._incarnation()

    # -- what must hold ---------------------------------------------------------------------

    @invariant()
    def running_exactly_when_a_turn_is_started_or_claimed(self) -> None:
        state = self.store.get_session(self.sid).state
        busy = self.turn is not None or _claimed(self.actor)
        assert (state is SessionState.RUNNING) == busy, (state, self.turn)
        assert self.slots.holds(self.sid) == (busy or self.declined)

    @invariant()
    def attempts_count_claims_not_returned(self) -> None:
        for command in self.store.commands_of(self.sid):
            assert command.attempts == self.claims[command.id], command

    def teardown(self) -> None:
        # A live owner works the queue off: nothing lost, nothing stuck.
        self.actor_message(agent_up=True)
        for _ in range(len(self.commands) + 2):
            if self.turn is not None:
                self.turn_ends()
            self.actor_message(agent_up=True)
        left = {c.id: c.state for c in self.store.commands_of(self.sid)}
        assert all(
            state in (CommandState.COMPLETED, CommandState.FAILED) for state in left.values()
        ), left
        assert set(left) == set(self.commands)
        for command_id, state in left.items():
            if state is CommandState.COMPLETED:
                assert self.sent[command_id] >= 1


def _claimed(actor: ActorOffer) -> bool:
    offer = actor._current
    return offer is not None and offer.state.value == "claimed"


@pytest.mark.timeout(600)
def test_no_prompt_is_lost_stuck_or_charged_for_a_returned_claim(store: Store) -> None:
    ClaimRace.store = store
    ClaimRace.TestCase.settings = settings(
        max_examples=40,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    ClaimRace.TestCase().runTest()
