"""What an agent connection is given and gives back: where its output goes (``Recorder``),
how its process is launched (``AgentLaunch``), what a turn and a session restore answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from protocol.agent.client import FsLimits
from protocol.agent.stderr_log import DEFAULT_MAX_BYTES

DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024


class Recorder(Protocol):
    """Where a connection's output goes (the actors write it to the store).

    ``updates`` and ``event`` are called on the loop, in wire order, and must not block:
    queue the write and return. ``updates`` gets the ``session/update`` frames of one read
    from the agent's stdout, each as its text verbatim and the tap's parse of it (to read,
    not to keep): one hand-over per read, so the frames of one read are written together.
    ``flush`` resolves once everything handed over is durable.
    """

    def updates(self, frames: list[tuple[str, dict[str, Any]]]) -> None: ...

    def event(self, kind: str, payload: dict[str, Any]) -> None: ...

    def flush(self) -> Awaitable[None]: ...


@runtime_checkable
class Pulling(Protocol):
    """A recorder the raw tap reads in step with: while it is ``holding`` (a write in
    flight, or its interval's timer armed), the tap may leave the agent's pipe unread, and
    the recorder's next event calls ``pull`` (the tap's, set while its session is attached
    to an agent process) to read it."""

    pull: Callable[[], None] | None

    @property
    def holding(self) -> bool: ...


class NullRecorder:
    """A ``Recorder`` that keeps nothing: a connection whose output is not recorded (serve's
    probe of the backend's capabilities; the runtime benchmark without the store)."""

    def updates(self, frames: list[tuple[str, dict[str, Any]]]) -> None:
        return None

    def event(self, kind: str, payload: dict[str, Any]) -> None:
        return None

    async def flush(self) -> None:
        return None


@dataclass(frozen=True)
class AgentLaunch:
    command: tuple[str, ...]
    cwd: str
    env: Mapping[str, str] = field(repr=False)  # may hold API keys: never printed
    stderr_path: str
    additional_directories: tuple[str, ...] = ()
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    # The most the agent's stdout is left unread while its sessions' output waits, so a
    # streamed turn is read a burst at a time (protocol/agent/tap.py); 0: never paused.
    read_coalesce_s: float = 0.0
    shutdown_timeout_s: float = 2.0
    terminals_enabled: bool = False
    # Advertise fs/* to the agent (off for agents that cannot create files through it).
    fs: bool = True
    fs_limits: FsLimits = field(default_factory=FsLimits)
    # The stderr log is cut to its newest part past this size (protocol/agent/stderr_log.py);
    # None: never cut.
    stderr_max_bytes: int | None = DEFAULT_MAX_BYTES
    # Values of ``env`` that are secrets (configured values, passed-through keys): replaced
    # by *** in whatever is kept of the agent's stderr (an exit's tail, an error message).
    secret_values: tuple[str, ...] = field(default=(), repr=False)
    # How many steps nicer than the control plane the agent's tree runs (0-19).
    nice: int = 0


@dataclass(frozen=True)
class TurnResult:
    stop_reason: str
    usage: dict[str, Any] | None = None
    timed_out: bool = False


@dataclass(frozen=True)
class SessionOpened:
    acp_session_id: str
    how: str  # "new" | "resumed" | "loaded" | "forked" | "context_lost"
    response: dict[str, Any] = field(default_factory=dict)
