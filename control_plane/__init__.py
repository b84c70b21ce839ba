"""acp-control-plane: durable sessions for coding agents over the Agent Client Protocol.

This package is the one public import surface: everything a host needs is re-exported here.

The re-exports are resolved on first use (PEP 562), so that importing a submodule (``acpctl``
is ``control_plane.cli``) does not pay for the ACP SDK schema, SQLAlchemy and the runtime
unless it uses them. ``from control_plane import X`` works as before for every name in
``__all__``; type checkers see the eager imports below.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors.settings import RuntimeSettings
    from control_plane.agents import AgentCommandError, AgentNotInstalled, UnknownAgent
    from control_plane.api import ControlPlane
    from control_plane.async_api import AsyncControlPlane
    from control_plane.importing import ImportOutcome
    from control_plane.outcome import Outcome
    from protocol.agent.permissions import Decision, PermissionPolicy
    from protocol.transcript.reader import TranscriptFormatError
    from state_machines import (
        AgentExited,
        AgentProtocolError,
        AgentStartFailed,
        BudgetExceeded,
        CheckpointError,
        CommandNotFound,
        CommandState,
        ControlPlaneError,
        EventKind,
        IdempotencyConflict,
        IllegalTransition,
        LimitExceeded,
        OutcomeStatus,
        OwnedElsewhere,
        QueueMode,
        SessionClosed,
        SessionNotFound,
        SessionState,
        StaleEpoch,
        StoreDamaged,
        StoreError,
        StoreUnavailable,
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
    from store.migrate import SchemaTooNew
    from store.placement import InvalidPlacement, Placement
    from store.queries.search import SearchFilters, SearchHit
    from store.search_query import SearchQueryError
    from store.usage import Budget, BudgetAction

__all__ = [
    "AgentCommandError",
    "AgentExited",
    "AgentNotInstalled",
    "AgentProtocolError",
    "AgentSpec",
    "AgentStartFailed",
    "AsyncControlPlane",
    "BindingRecord",
    "Budget",
    "BudgetAction",
    "BudgetExceeded",
    "CheckpointError",
    "CommandKind",
    "CommandNotFound",
    "CommandRecord",
    "CommandState",
    "ControlPlane",
    "ControlPlaneError",
    "Decision",
    "EventKind",
    "EventRecord",
    "IdempotencyConflict",
    "IllegalTransition",
    "ImportOutcome",
    "IntegrityCheck",
    "InvalidPlacement",
    "LimitExceeded",
    "Outcome",
    "OutcomeStatus",
    "OwnedElsewhere",
    "PermissionPolicy",
    "Placement",
    "QueueMode",
    "RecoveryReport",
    "RuntimeSettings",
    "SchemaTooNew",
    "SearchFilters",
    "SearchHit",
    "SearchQueryError",
    "SessionClosed",
    "SessionNotFound",
    "SessionRecord",
    "SessionState",
    "SpawnResult",
    "StaleEpoch",
    "StoreDamaged",
    "StoreError",
    "StoreOptions",
    "StoreUnavailable",
    "Synchronous",
    "TranscriptFormatError",
    "UnknownAgent",
]

# Where each public name lives; kept in step with the TYPE_CHECKING imports above.
_SOURCES: dict[str, str] = {
    "RuntimeSettings": "actors.settings",
    "AgentCommandError": "control_plane.agents",
    "AgentNotInstalled": "control_plane.agents",
    "UnknownAgent": "control_plane.agents",
    "SchemaTooNew": "store.migrate",
    "Budget": "store.usage",
    "Placement": "store.placement",
    "InvalidPlacement": "store.placement",
    "SearchFilters": "store.queries.search",
    "SearchHit": "store.queries.search",
    "SearchQueryError": "store.search_query",
    "BudgetAction": "store.usage",
    "ControlPlane": "control_plane.api",
    "AsyncControlPlane": "control_plane.async_api",
    "ImportOutcome": "control_plane.importing",
    "TranscriptFormatError": "protocol.transcript.reader",
    "Outcome": "control_plane.outcome",
    "QueueMode": "state_machines",
    "Decision": "protocol.agent.permissions",
    "PermissionPolicy": "protocol.agent.permissions",
    **dict.fromkeys(
        (
            "AgentExited",
            "AgentProtocolError",
            "AgentStartFailed",
            "BudgetExceeded",
            "CheckpointError",
            "CommandNotFound",
            "CommandState",
            "ControlPlaneError",
            "EventKind",
            "IdempotencyConflict",
            "IllegalTransition",
            "LimitExceeded",
            "OutcomeStatus",
            "OwnedElsewhere",
            "SessionClosed",
            "SessionNotFound",
            "SessionState",
            "StaleEpoch",
            "StoreError",
            "StoreDamaged",
            "StoreUnavailable",
        ),
        "state_machines",
    ),
    **dict.fromkeys(
        (
            "AgentSpec",
            "BindingRecord",
            "CommandKind",
            "CommandRecord",
            "EventRecord",
            "IntegrityCheck",
            "RecoveryReport",
            "SessionRecord",
            "SpawnResult",
            "StoreOptions",
            "Synchronous",
        ),
        "store",
    ),
}

if not TYPE_CHECKING:  # type checkers see the real imports, and no catch-all attribute

    def __getattr__(name: str) -> Any:
        source = _SOURCES.get(name)
        if source is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(import_module(source), name)
        globals()[name] = value  # resolved once; later lookups skip this function
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
