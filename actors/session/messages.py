"""Messages a SessionActor handles (one frozen dataclass each; sent with ``tell``/``ask``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from protocol.agent.types import TurnResult

if TYPE_CHECKING:  # turn_end.py imports the actor's parts: no import cycle at run time
    from actors.session.turn_end import TurnEnd


@dataclass(frozen=True)
class Wake:
    """There may be work: look at the queue."""


@dataclass(frozen=True)
class SlotGranted:
    """The supervisor gave this session one of the ``max_running_turns`` slots."""


@dataclass(frozen=True)
class TurnDone:
    """The agent answered (or failed) the prompt started for these commands."""

    command_ids: tuple[str, ...]
    result: TurnResult | None
    error: BaseException | None
    # The turn's ending write, already under way from the loop (actors/session/turn_end.py);
    # None when the session is closing, or when the loop could not build it.
    end: TurnEnd | None = None


@dataclass(frozen=True)
class CancelTurn:
    """Ask the agent to stop the running turn (the store was already updated)."""


@dataclass(frozen=True)
class CloseSession:
    reason: str


@dataclass(frozen=True)
class AgentGone:
    """The agent process ended on its own."""

    exit_code: int | None


@dataclass(frozen=True)
class Noticed:
    """Another node changed the session in the store (a cancel, a close, new work): look
    now rather than at the next tick."""


@dataclass(frozen=True)
class Tick:
    """Periodic: passivate when idle long enough, or at once when idle and ``over_cap`` (the
    least recently used beyond ``max_live_agents``)."""

    now: float
    over_cap: bool = False
