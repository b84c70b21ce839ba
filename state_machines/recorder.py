"""The event recorder's write pipeline (``actors/session/recorder.py``).

One write in flight at a time, so the log keeps wire order. ``idle``: nothing pending and
nothing in flight. ``armed``: frames wait on a timer, for the record interval, for the
retry of a write the store refused for now, or a moment for the write an answer of the
agent's brings (a turn's outcome, so that the turn's last frames commit with it).
``in_flight``: one write submitted; whatever arrives meanwhile waits for it and goes with
the next. ``failed``: a write of frames failed for good (a fenced owner, a damaged store):
nothing later can be ordered behind those frames, so nothing more is written, and every
flush and ``write_after`` fails at once.
"""

from __future__ import annotations

from enum import StrEnum

from state_machines.table import TransitionTable


class RecorderState(StrEnum):
    IDLE = "idle"
    ARMED = "armed"
    IN_FLIGHT = "in_flight"
    FAILED = "failed"


class RecorderEvent(StrEnum):
    HOLD = "hold"  # frames handed over wait for the interval or an answer's write (a timer)
    SUBMIT = "submit"  # what is pending is written (a write leaves for the store)
    TIMER_EMPTY = "timer_empty"  # the timer fired and nothing was pending any more
    WRITTEN = "written"  # the write committed and nothing is pending
    REFUSED = "refused"  # the store refused the write for now: it waits for a retry timer
    LOST = "lost"  # the write of frames failed for good


_S = RecorderState
_E = RecorderEvent

RECORDER_MACHINE: TransitionTable[RecorderState, RecorderEvent] = TransitionTable(
    name="recorder",
    initial=_S.IDLE,
    transitions={
        (_S.IDLE, _E.HOLD): _S.ARMED,
        (_S.IDLE, _E.SUBMIT): _S.IN_FLIGHT,
        (_S.ARMED, _E.SUBMIT): _S.IN_FLIGHT,  # the timer, or a flush that does not wait
        (_S.ARMED, _E.TIMER_EMPTY): _S.IDLE,
        (_S.IN_FLIGHT, _E.SUBMIT): _S.IN_FLIGHT,  # written; what came meanwhile goes next
        (_S.IN_FLIGHT, _E.HOLD): _S.ARMED,  # written; what came meanwhile waits its turn
        (_S.IN_FLIGHT, _E.WRITTEN): _S.IDLE,
        (_S.IN_FLIGHT, _E.REFUSED): _S.ARMED,
        (_S.IN_FLIGHT, _E.LOST): _S.FAILED,
    },
    final=frozenset({_S.FAILED}),
)
