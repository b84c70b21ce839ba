"""The durable store: SQLite in WAL mode through SQLAlchemy Core, one group-commit writer."""

from store.async_reads import AsyncReader
from store.engine import Synchronous
from store.faults import InjectedFault
from store.feed import CommittedEvent, SessionCommit
from store.integrity import IntegrityCheck
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
from store.store import Store, StoreOptions
from store.writer import WriteContext

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
    "InjectedFault",
    "IntegrityCheck",
    "NewEvent",
    "RecoveryReport",
    "SessionCommit",
    "SessionRecord",
    "SinkKind",
    "SpawnResult",
    "Store",
    "StoreOptions",
    "SubagentLimits",
    "Synchronous",
    "WriteContext",
]
