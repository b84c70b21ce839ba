"""A state machine as one table: ``{(state, event): next_state}``.

Pure data plus lookups; no I/O. A missing entry raises ``IllegalTransition`` and the caller's
state is unchanged (the machine holds no state of its own). The SQL guards in ``store/`` ask
``sources(event)`` for the states an event may leave from, so the table stays the single
source of truth.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from state_machines.errors import IllegalTransition

S = TypeVar("S", bound=StrEnum)
E = TypeVar("E", bound=StrEnum)


@dataclass(frozen=True)
class TransitionTable(Generic[S, E]):
    name: str
    initial: S
    transitions: Mapping[tuple[S, E], S]
    final: frozenset[S]

    def next_state(self, state: S, event: E, subject: str | None = None) -> S:
        """The state after ``event`` in ``state``; raises ``IllegalTransition`` if there is none."""
        try:
            return self.transitions[(state, event)]
        except KeyError:
            raise IllegalTransition(self.name, str(state), str(event), subject) from None

    def allows(self, state: S, event: E) -> bool:
        return (state, event) in self.transitions

    def sources(self, event: E) -> frozenset[S]:
        """Every state in which ``event`` has an entry (the allowed set of a SQL guard)."""
        return frozenset(src for (src, ev) in self.transitions if ev == event)

    def targets(self, event: E) -> frozenset[S]:
        return frozenset(dst for (_, ev), dst in self.transitions.items() if ev == event)

    def states(self) -> frozenset[S]:
        found = {self.initial}
        for (src, _), dst in self.transitions.items():
            found.update((src, dst))
        return frozenset(found)

    def events(self) -> frozenset[E]:
        return frozenset(ev for (_, ev) in self.transitions)
