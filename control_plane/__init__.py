"""acp-control-plane: durable sessions for coding agents over the Agent Client Protocol.

This package is the one public import surface: everything a host needs is re-exported here.
"""

from actors.settings import RuntimeSettings
from control_plane.api import ControlPlane
from control_plane.async_api import AsyncControlPlane
from control_plane.outcome import Outcome
from control_plane.queue_modes import QueueMode
from protocol.permissions import Decision, PermissionPolicy
from state_machines import (
    AgentExited,
    AgentProtocolError,
    AgentStartFailed,
    CheckpointError,
    CommandNotFound,
    CommandState,
    ControlPlaneError,
    IdempotencyConflict,
    IllegalTransition,
    LimitExceeded,
    OwnedElsewhere,
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
    "AgentExited",
    "AgentProtocolError",
    "AgentSpec",
    "AgentStartFailed",
    "AsyncControlPlane",
    "BindingRecord",
    "CheckpointError",
    "CommandKind",
    "CommandNotFound",
    "CommandRecord",
    "CommandState",
    "ControlPlane",
    "ControlPlaneError",
    "Decision",
    "EventRecord",
    "IdempotencyConflict",
    "IllegalTransition",
    "IntegrityCheck",
    "LimitExceeded",
    "Outcome",
    "OwnedElsewhere",
    "PermissionPolicy",
    "QueueMode",
    "RecoveryReport",
    "RuntimeSettings",
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
