"""Immutable records the store hands out, and the inputs it takes.

One frozen dataclass per input (Temporal's habit) keeps request hashing canonical and makes
an idempotent replay compare like with like.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from functools import cached_property
from typing import Any

from state_machines import COMMAND_MACHINE, CommandState, SessionState
from store.placement import Placement


class CommandKind(StrEnum):
    PROMPT = "prompt"
    SET_MODE = "set_mode"
    SET_CONFIG_OPTION = "set_config_option"


class SinkKind(StrEnum):
    CALLBACK = "callback"  # an in-process function registered under ``target``
    JSONL = "jsonl"  # an append-only JSONL file at path ``target``
    PARENT = "parent"  # announce the session's run outcomes into parent session ``target``


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


@dataclass(frozen=True)
class AgentSpec:
    """How to start an agent: a name for humans and transcripts, a command line, and the
    names of the environment variables it is configured with.

    ``env`` may carry those variables' values (API keys, endpoints) for this process only:
    they are never stored, hashed into a stored digest, printed or exported. ``to_json`` (what
    the store keeps) holds their names; a launch resolves the values from the configuration
    current at that moment (``actors.settings.AgentProfiles``), so a rotated key reaches an
    existing session. ``repr`` hides the values too.
    """

    name: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)
    env_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        names = tuple(sorted({*self.env_names, *(k for k, _ in self.env)}))
        if names != self.env_names:
            object.__setattr__(self, "env_names", names)

    def to_json(self) -> dict[str, Any]:
        """What the store keeps: never a value."""
        return {"name": self.name, "command": list(self.command), "envNames": list(self.env_names)}

    def legacy_json(self) -> dict[str, Any]:
        """The form releases before 0.2 stored (values in clear): only to recognise the
        request hash of a spawn such a release recorded (``store.operations.spawn``)."""
        return {"name": self.name, "command": list(self.command), "env": dict(self.env)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AgentSpec:
        """A stored spec. A legacy ``env`` object (an unmigrated row) yields only its names."""
        names = data.get("envNames")
        if names is None:
            names = list(dict(data.get("env") or {}))
        return cls(
            name=str(data["name"]),
            command=tuple(str(c) for c in data.get("command", ())),
            env_names=tuple(sorted(str(n) for n in names)),
        )


@dataclass(frozen=True)
class BindingSpec:
    sink_kind: SinkKind
    target: str

    def to_json(self) -> dict[str, Any]:
        return {"sinkKind": self.sink_kind.value, "target": self.target}


@dataclass(frozen=True)
class SubagentLimits:
    """Limits on session trees (checked inside the spawn transaction)."""

    max_depth: int = 2  # a root is depth 0; its children 1; grandchildren 2
    max_children: int = 5  # open (not closed) children per session


@dataclass(frozen=True)
class NewEvent:
    """An event to append. ``payload`` is a JSON text kept verbatim, or a value to encode."""

    kind: str
    payload: str | dict[str, Any] = field(default_factory=dict)

    def payload_text(self) -> str:
        if isinstance(self.payload, str):
            json.loads(self.payload)  # refuse non-JSON here, not in a reader months later
            return self.payload
        return json.dumps(self.payload, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class SessionRecord:
    id: str
    spawn_key: str | None
    parent_id: str | None
    depth: int
    agent: AgentSpec
    cwd: str
    state: SessionState
    queue_mode: str
    acp_session_id: str | None
    owner: str | None
    epoch: int
    last_event_seq: int
    created_at: datetime
    updated_at: datetime
    closed_at: datetime | None
    last_error: str | None
    metadata: dict[str, Any]
    # The live (or last) agent's process tree: host, bootId, reaperPid, reaperStart, pgid.
    agent_process: dict[str, Any] | None = None
    # Where it may run: None for any node (store/placement.py).
    placement: Placement | None = None


@dataclass(frozen=True)
class CommandRecord:
    id: str
    session_id: str
    seq: int
    kind: CommandKind
    payload_json: str  # parsed on first use: the hot path hands many records back unread
    idempotency_key: str | None
    state: CommandState
    attempts: int
    max_attempts: int
    result_json: str | None
    error: str | None
    # Seconds since the epoch, as stored. The writer thread builds a record for every write
    # of a command and most are never asked their times: the datetimes (``created_at``...)
    # are made on first use.
    created_ts: float
    started_ts: float | None
    finished_ts: float | None

    @cached_property
    def created_at(self) -> datetime:
        return utc(self.created_ts)

    @cached_property
    def started_at(self) -> datetime | None:
        return None if self.started_ts is None else utc(self.started_ts)

    @cached_property
    def finished_at(self) -> datetime | None:
        return None if self.finished_ts is None else utc(self.finished_ts)

    @cached_property
    def payload(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.payload_json)
        return value

    @cached_property
    def result(self) -> dict[str, Any] | None:
        if self.result_json is None:
            return None
        value: dict[str, Any] = json.loads(self.result_json)
        return value

    @property
    def is_final(self) -> bool:
        return self.state in COMMAND_MACHINE.final


@dataclass(frozen=True)
class EventRecord:
    id: int  # global, never reused; sinks dedupe by it
    session_id: str
    seq: int  # per session, contiguous from 1
    command_id: str | None
    kind: str
    raw: str  # the payload's JSON text exactly as appended
    created: float  # epoch seconds, as stored; ``created_at`` is made on first use

    @cached_property
    def created_at(self) -> datetime:
        return utc(self.created)

    @cached_property
    def payload(self) -> dict[str, Any]:
        value = json.loads(self.raw)
        return value if isinstance(value, dict) else {"value": value}


@dataclass(frozen=True)
class BindingRecord:
    id: str
    session_id: str
    sink_kind: SinkKind
    target: str
    active: bool
    last_delivered_seq: int
    bound_at: datetime


@dataclass(frozen=True)
class SpawnResult:
    session: SessionRecord
    binding: BindingRecord | None
    command: CommandRecord | None
    created: bool  # False when an earlier spawn with the same key was returned


@dataclass(frozen=True)
class EnqueueResult:
    command: CommandRecord
    created: bool  # False when an earlier command with the same key was returned


@dataclass(frozen=True)
class RecoveryReport:
    requeued: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    sessions_to_error: tuple[str, ...] = ()
