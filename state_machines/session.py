"""The session state machine.

``creating -> idle -> running -> idle -> ... -> closed``, plus ``running -> cancelling ->
idle`` and ``error`` (the agent could not start or died; ``error -> idle`` after a successful
restart). ``closed`` is terminal: a repeated close or cancel there is absorbed, anything else
is illegal. ``cancel`` is absorbed wherever no turn runs, so cancelling is always safe to retry.
"""

from __future__ import annotations

from enum import StrEnum

from state_machines.table import TransitionTable


class SessionState(StrEnum):
    CREATING = "creating"
    IDLE = "idle"
    RUNNING = "running"
    CANCELLING = "cancelling"
    ERROR = "error"
    CLOSED = "closed"


class SessionEvent(StrEnum):
    CREATED = "created"  # the agent started and the ACP session exists
    START_FAILED = "start_failed"  # the agent could not be started or initialized
    TURN_STARTED = "turn_started"  # a prompt was sent to the agent
    TURN_ENDED = "turn_ended"  # the agent answered the prompt (any stop reason)
    CANCEL = "cancel"  # the host asked to cancel the running turn
    AGENT_DIED = "agent_died"  # the agent process exited or was killed unexpectedly
    RESTARTED = "restarted"  # a new agent process took over the session
    CLOSE = "close"  # the session ends for good


_S = SessionState
_E = SessionEvent

SESSION_MACHINE: TransitionTable[SessionState, SessionEvent] = TransitionTable(
    name="session",
    initial=_S.CREATING,
    transitions={
        (_S.CREATING, _E.CREATED): _S.IDLE,
        (_S.CREATING, _E.START_FAILED): _S.ERROR,
        (_S.CREATING, _E.CANCEL): _S.CREATING,
        (_S.CREATING, _E.CLOSE): _S.CLOSED,
        (_S.IDLE, _E.TURN_STARTED): _S.RUNNING,
        (_S.IDLE, _E.CANCEL): _S.IDLE,
        (_S.IDLE, _E.AGENT_DIED): _S.ERROR,
        (_S.IDLE, _E.CLOSE): _S.CLOSED,
        (_S.RUNNING, _E.TURN_ENDED): _S.IDLE,
        (_S.RUNNING, _E.CANCEL): _S.CANCELLING,
        (_S.RUNNING, _E.AGENT_DIED): _S.ERROR,
        (_S.RUNNING, _E.CLOSE): _S.CLOSED,
        (_S.CANCELLING, _E.TURN_ENDED): _S.IDLE,
        (_S.CANCELLING, _E.CANCEL): _S.CANCELLING,
        (_S.CANCELLING, _E.AGENT_DIED): _S.ERROR,
        (_S.CANCELLING, _E.CLOSE): _S.CLOSED,
        (_S.ERROR, _E.RESTARTED): _S.IDLE,
        (_S.ERROR, _E.START_FAILED): _S.ERROR,
        (_S.ERROR, _E.CANCEL): _S.ERROR,
        (_S.ERROR, _E.CLOSE): _S.CLOSED,
        (_S.CLOSED, _E.CLOSE): _S.CLOSED,
        (_S.CLOSED, _E.CANCEL): _S.CLOSED,
    },
    final=frozenset({_S.CLOSED}),
)

# States in which a turn holds a slot of ``max_running_turns``.
TURN_STATES = frozenset({SessionState.RUNNING, SessionState.CANCELLING})
