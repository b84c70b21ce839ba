"""The durable store: SQLite in WAL mode through SQLAlchemy Core, one group-commit writer.

``AsyncReader`` (aiosqlite and SQLAlchemy's asyncio extension) is imported on first use:
most processes, and every ``acpctl`` read command, never read asynchronously."""

from typing import TYPE_CHECKING, Any

from store.engine import Synchronous
from store.feed import CommittedEvent, SessionCommit, SessionWatch
from store.integrity import IntegrityCheck
from store.opening import StoreOptions
from store.records import (
    AgentSpec,
    BindingRecord,
    BindingSpec,
    CommandKind,
    CommandRecord,
    EnqueueResult,
    EventRecord,
    NewEvent,
    RecoveryReport,
    SessionRecord,
    SinkKind,
    SpawnResult,
    SubagentLimits,
)
from store.store import Store

if TYPE_CHECKING:
    from store.async_reads import AsyncReader

__all__ = [
    "AgentSpec",
    "AsyncReader",
    "BindingRecord",
    "BindingSpec",
    "CommandKind",
    "CommandRecord",
    "CommittedEvent",
    "EnqueueResult",
    "EventRecord",
    "IntegrityCheck",
    "NewEvent",
    "RecoveryReport",
    "SessionCommit",
    "SessionRecord",
    "SessionWatch",
    "SinkKind",
    "SpawnResult",
    "Store",
    "StoreOptions",
    "SubagentLimits",
    "Synchronous",
]


if not TYPE_CHECKING:  # type checkers see the import above, and no catch-all attribute

    def __getattr__(name: str) -> Any:
        if name == "AsyncReader":
            from store.async_reads import AsyncReader

            globals()[name] = AsyncReader
            return AsyncReader
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
