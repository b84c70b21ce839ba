"""The command (run) state machine.

``queued -> running -> completed | failed | cancelled``, ``queued -> cancelled``, and
``running -> queued`` when an interrupted run is retried within its attempt budget.
``interrupted`` is the outcome of a run that a crash cut short and that is not sent again
(the session's policy, or an agent that restored the conversation with the prompt already
in it): from ``running`` at recovery, or from ``queued`` once the restarted agent shows it
kept its context. The four final states accept nothing: an outcome, once recorded, never
changes.
"""

from __future__ import annotations

from enum import StrEnum

from state_machines.table import TransitionTable


class CommandState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


class CommandEvent(StrEnum):
    CLAIM = "claim"  # a session actor took the command to run it
    COMPLETE = "complete"  # it ran to an outcome
    FAIL = "fail"  # it could not run to an outcome
    CANCEL = "cancel"  # the host cancelled it before or while it ran
    REQUEUE = "requeue"  # it was interrupted (crash, lost owner) and will run again
    INTERRUPT = "interrupt"  # it was interrupted and will not be sent again


_C = CommandState
_V = CommandEvent

COMMAND_MACHINE: TransitionTable[CommandState, CommandEvent] = TransitionTable(
    name="command",
    initial=_C.QUEUED,
    transitions={
        (_C.QUEUED, _V.CLAIM): _C.RUNNING,
        (_C.QUEUED, _V.CANCEL): _C.CANCELLED,
        (_C.RUNNING, _V.COMPLETE): _C.COMPLETED,
        (_C.RUNNING, _V.FAIL): _C.FAILED,
        (_C.RUNNING, _V.CANCEL): _C.CANCELLED,
        (_C.RUNNING, _V.REQUEUE): _C.QUEUED,
        (_C.RUNNING, _V.INTERRUPT): _C.INTERRUPTED,
        (_C.QUEUED, _V.INTERRUPT): _C.INTERRUPTED,
    },
    final=frozenset({_C.COMPLETED, _C.FAILED, _C.CANCELLED, _C.INTERRUPTED}),
)
