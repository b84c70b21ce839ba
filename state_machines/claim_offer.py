"""A live idle session's offer to have its next prompt claimed in the transaction that queues
it (``actors/session/claim_offer.py``).

``open``: the session's actor is idle with its agent up, and published the offer. ``taken``:
a prompt's write holds it and is in flight; the actor may not claim on its own until the
write is settled. ``claimed``: that write committed with the prompt claimed (the session is
``running`` in the store): the turn is the actor's to start. ``declined``: the write did not
claim (the session was not idle at its epoch, another command was ahead, no turn slot was
free, or the write failed): the actor looks at the queue as after any enqueue.
``withdrawn``: the actor took the offer back before anyone took it (it has other work, or
stops). ``started``: the actor started the claimed turn. ``returned``: the actor could not
start it (its agent died, the process is stopping) and put the prompt back in the queue
unsent (``ops.unclaim``): it costs no attempt.

Every offer is used once: an idle actor publishes a new one.
"""

from __future__ import annotations

from enum import StrEnum

from state_machines.table import TransitionTable


class OfferState(StrEnum):
    OPEN = "open"
    TAKEN = "taken"
    CLAIMED = "claimed"
    DECLINED = "declined"
    WITHDRAWN = "withdrawn"
    STARTED = "started"
    RETURNED = "returned"


class OfferEvent(StrEnum):
    TAKE = "take"  # a prompt's write took the offer (with a turn slot)
    CLAIM = "claim"  # that write committed with the prompt claimed
    DECLINE = "decline"  # that write committed without a claim, or failed
    WITHDRAW = "withdraw"  # the actor took the offer back
    START = "start"  # the actor started the claimed turn
    RETURN = "return"  # the actor put the claimed prompt back in the queue, unsent


_S = OfferState
_E = OfferEvent

OFFER_MACHINE: TransitionTable[OfferState, OfferEvent] = TransitionTable(
    name="claim offer",
    initial=_S.OPEN,
    transitions={
        (_S.OPEN, _E.TAKE): _S.TAKEN,
        (_S.OPEN, _E.WITHDRAW): _S.WITHDRAWN,
        (_S.TAKEN, _E.CLAIM): _S.CLAIMED,
        (_S.TAKEN, _E.DECLINE): _S.DECLINED,
        (_S.CLAIMED, _E.START): _S.STARTED,
        (_S.CLAIMED, _E.RETURN): _S.RETURNED,
    },
    final=frozenset({_S.DECLINED, _S.WITHDRAWN, _S.STARTED, _S.RETURNED}),
)
