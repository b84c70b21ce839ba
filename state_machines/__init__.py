"""Pure state machines for sessions and commands, and the control plane's exception tree."""

from state_machines.command import COMMAND_MACHINE, CommandEvent, CommandState
from state_machines.errors import (
    AgentExited,
    AgentProtocolError,
    AgentStartFailed,
    BudgetExceeded,
    CheckpointError,
    CommandNotFound,
    ControlPlaneError,
    IdempotencyConflict,
    IllegalTransition,
    LimitExceeded,
    OwnedElsewhere,
    SessionClosed,
    SessionNotFound,
    StaleEpoch,
    StoreDamaged,
    StoreError,
    StoreUnavailable,
    TokenNotFound,
)
from state_machines.event_kinds import EventKind
from state_machines.outcome_status import OutcomeStatus, outcome_status
from state_machines.queue_modes import QueueMode
from state_machines.session import SESSION_MACHINE, TURN_STATES, SessionEvent, SessionState
from state_machines.table import TransitionTable

__all__ = [
    "COMMAND_MACHINE",
    "SESSION_MACHINE",
    "TURN_STATES",
    "AgentExited",
    "AgentProtocolError",
    "AgentStartFailed",
    "BudgetExceeded",
    "CheckpointError",
    "CommandEvent",
    "CommandNotFound",
    "CommandState",
    "ControlPlaneError",
    "EventKind",
    "IdempotencyConflict",
    "IllegalTransition",
    "LimitExceeded",
    "OutcomeStatus",
    "OwnedElsewhere",
    "QueueMode",
    "SessionClosed",
    "SessionEvent",
    "SessionNotFound",
    "SessionState",
    "StaleEpoch",
    "StoreDamaged",
    "StoreError",
    "StoreUnavailable",
    "TokenNotFound",
    "TransitionTable",
    "outcome_status",
]
