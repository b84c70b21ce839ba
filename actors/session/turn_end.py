"""A turn's end, written from the protocol loop the moment the agent answers.

The agent's answer to ``session/prompt`` arrives on the loop, where the recorder's pipeline
lives (``recorder.py``). The write that ends the turn (``finish_turn`` or ``fail_turn``, the
turn's usage against budgets, a child's announce) is built there from what the actor fixed
when it started the turn (``TurnEnder``) and handed to the recorder's ``write_after`` on the
spot: behind the turn's last frames, in their transaction where they are not written yet.
The actor is told ``TurnDone`` with the write already under way (``TurnEnd``) and waits for
its commit. So the answer goes loop -> writer -> actor: the actor's own hop to the loop and
back, to submit a write it could only build after being told, is not on the path.

What needs the actor (its slot, the next turn, stopping a dead agent, closing a ``mode=run``
child, waking siblings) stays with the actor, after the commit. A session that is closing
gets no end written from the loop (its close records what became of the turn), nor does an
actor that is stopping (a shutdown interrupts the turn: ``spare_interrupted_turn``): the
actor sets ``closing`` / ``stop_asked`` before it cancels the turn or stops the agent, so
the loop, which learns of the end only after that, sees them. If the actor is told with no
end built, it builds the end itself, as it did before.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pykka

from actors.session import messages as msg
from actors.session.budget_watch import BudgetWatch
from actors.session.family import announcing
from actors.session.outcomes import failed_turn, turn_outcome
from actors.session.recorder import StoreRecorder
from protocol.agent.types import TurnResult
from store.ops import turns
from store.writer import WriteContext

log = logging.getLogger(__name__)


@dataclass
class TurnEnd:
    """The turn's ending write, submitted on the loop."""

    # The write itself: written directly (``write_until_taken``) when the recorder had lost
    # frames before it, so nothing can be ordered behind them.
    write: Callable[[WriteContext], Any]
    # Its commit through the recorder (None when the recorder had failed already); the
    # value is ``finish_turn``'s "anything queued" (a failed turn's is None).
    committed: Future[Any] | None
    # Run on the actor after the commit: cancel what a tree budget stopped, wake a parent
    # that got an announce's follow-up.
    then: list[Callable[[], None]] = field(default_factory=list)
    agent_alive: bool = True


@dataclass(frozen=True)
class TurnEnder:
    """What the actor fixes when it starts a turn, to end it on the loop."""

    session_id: str
    epoch: int
    command_ids: tuple[str, ...]
    turn_timeout: float | None
    recorder: StoreRecorder
    budget: BudgetWatch
    announce_as_prompt: bool | None  # a child's (None: not a child)
    notify: Callable[[str], None]

    def end(self, result: TurnResult | None, error: BaseException | None) -> TurnEnd:
        """On the loop: build the ending write and hand it to the recorder."""
        sid, epoch, ids = self.session_id, self.epoch, self.command_ids
        then: list[Callable[[], None]] = []
        agent_alive = True
        write: Callable[[WriteContext], Any]
        if error is None and result is not None:
            outcome, final, why = turn_outcome(result, self.recorder.take_text(), self.turn_timeout)
            write, budget_then = self.budget.after_turn(
                lambda ctx: turns.finish_turn(ctx, sid, epoch, ids, outcome, final, why),
                outcome.get("usage"),
            )
            then.append(budget_then)
        else:
            write, agent_alive = failed_turn(sid, epoch, ids, error, self.recorder)
        if self.announce_as_prompt is not None:
            write, announced = announcing(write, sid, ids, self.announce_as_prompt, self.notify)
            then.append(announced)
        committed = None if self.recorder.failed else self.recorder.write_after(write)
        return TurnEnd(write, committed, then, agent_alive)

    def on_answer(
        self, actor: pykka.ActorRef[Any], unwanted: Callable[[], bool]
    ) -> Callable[[Future[TurnResult]], None]:
        """The prompt's done callback (on the loop): end the turn there unless ``unwanted``
        (read after the agent answered: the actor sets its flags before it cancels the turn
        or stops the agent), then tell the actor ``TurnDone``. A cancelled future (the loop
        is stopping) or a dead actor (closed meanwhile) leaves nothing to report to."""

        def done(future: Future[TurnResult]) -> None:
            if future.cancelled():
                return
            error = future.exception()
            result = None if error else future.result()
            end = None
            if not unwanted():
                try:
                    end = self.end(result, error)
                except Exception:  # the actor builds it again, and reports what fails
                    log.exception("session %s: ending the turn on the loop", self.session_id)
            with contextlib.suppress(pykka.ActorDeadError):
                actor.tell(msg.TurnDone(self.command_ids, result, error, end))

        return done
