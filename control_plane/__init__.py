"""acp-control-plane: durable sessions for coding agents over the Agent Client Protocol.

This package is the one public import surface: everything a host needs is re-exported here.
"""

from control_plane.api import ControlPlane
from state_machines import (
    AgentProtocolError,
    AgentStartFailed,
    CheckpointError,
    CommandNotFound,
    CommandState,
    ControlPlaneError,
    IdempotencyConflict,
    IllegalTransition,
    LimitExceeded,
    SessionClosed,
    SessionNotFound,
    SessionState,
    StaleEpoch,
    StoreError,
)
from store import (
    AgentSpec,
    BindingRecord,
    CommandKind,
    CommandRecord,
    EventRecord,
    IntegrityCheck,
    RecoveryReport,
    SessionRecord,
    SpawnResult,
    StoreOptions,
    Synchronous,
)

__all__ = [
    "AgentProtocolError",
    "AgentSpec",
    "AgentStartFailed",
    "BindingRecord",
    "CheckpointError",
    "CommandKind",
    "CommandNotFound",
    "CommandRecord",
    "CommandState",
    "ControlPlane",
    "ControlPlaneError",
    "EventRecord",
    "IdempotencyConflict",
    "IllegalTransition",
    "IntegrityCheck",
    "LimitExceeded",
    "RecoveryReport",
    "SessionClosed",
    "SessionNotFound",
    "SessionRecord",
    "SessionState",
    "SpawnResult",
    "StaleEpoch",
    "StoreError",
    "StoreOptions",
    "Synchronous",
]
