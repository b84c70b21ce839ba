"""A session's budgets while it runs: what the actor does with reported usage.

A turn's tokens are counted in the transaction that records its outcome (``after_turn``
composes that write). A ``usage_update`` carrying a cost arrives mid-turn on the protocol
loop: it is recorded and checked in a write of its own, submitted without waiting, and when
a stop budget is reached the running turns of every session it stopped are cancelled
(``CancelTurn`` is a ``tell``: nothing blocks the loop or the writer)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from actors.session.deps import ActorDeps
from actors.session.recorder import StoreRecorder
from store import Store
from store.ops import budgets
from store.usage import usage_update_cost
from store.writer import WriteContext

log = logging.getLogger(__name__)
T = TypeVar("T")


class BudgetWatch:
    def __init__(
        self,
        store: Store,
        session_id: str,
        defaults: budgets.BudgetDefaults,
        cancel_turn: Callable[[str], None],
    ) -> None:
        self._store = store
        self._session_id = session_id
        self._defaults = defaults
        self._cancel_turn = cancel_turn
        self._last_cost: float | None = None

    @classmethod
    def attached(cls, recorder: StoreRecorder, deps: ActorDeps) -> BudgetWatch:
        """The session's watch, fed with the costs its recorder sees."""
        watch = cls(deps.store, recorder.session_id, deps.settings.budgets, deps.cancel_turn)
        recorder.watchers.append(watch.on_frame)
        return watch

    def after_turn(
        self, record_outcome: Callable[[WriteContext], T], usage: dict[str, Any] | None
    ) -> tuple[Callable[[WriteContext], T], Callable[[], None]]:
        """The outcome's write with the turn's usage counted in it, and what to run once it
        committed (cancel the turns of other sessions a tree budget stopped)."""
        stopped: list[str] = []

        def write(ctx: WriteContext) -> T:
            recorded = record_outcome(ctx)
            stopped.extend(budgets.add_turn_usage(ctx, self._session_id, usage, self._defaults))
            return recorded

        def then() -> None:
            for sid in stopped:
                if sid != self._session_id:  # this session's turn has just ended
                    self._cancel_turn(sid)

        return write, then

    def on_frame(self, frame: dict[str, Any]) -> None:
        """A frame from the agent (on the protocol loop): a ``usage_update``'s cost counts."""
        cost = usage_update_cost(frame)
        if cost is not None:
            self.on_cost(cost)

    def on_cost(self, cost_usd: float) -> None:
        """A ``usage_update`` reported the session's cumulative cost (on the protocol loop)."""
        if cost_usd == self._last_cost:
            return
        self._last_cost = cost_usd
        sid, defaults = self._session_id, self._defaults
        future = self._store.submit(lambda ctx: budgets.record_cost(ctx, sid, cost_usd, defaults))
        future.add_done_callback(self._cost_recorded)

    def _cost_recorded(self, future: Future[list[str]]) -> None:  # on the writer thread
        exc = future.exception()
        if exc is not None:
            log.warning("usage of session %s not recorded: %s", self._session_id, exc)
            return
        for sid in future.result():
            self._cancel_turn(sid)
