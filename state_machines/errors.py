"""The exception tree of the control plane, in one place.

Every error the control plane raises on purpose is a ``ControlPlaneError``; callers can catch
the root or a typed child. Fields carry the ids and states involved so a host can react
without parsing messages. Mapping to JSON-RPC codes happens only in ``protocol/``.

    ControlPlaneError
    ├── IllegalTransition      a state machine event with no entry in its table
    ├── SessionNotFound        no session with that id
    ├── CommandNotFound        no command with that id
    ├── IdempotencyConflict    a key reused with another payload
    ├── SessionClosed          a command sent to a closed session
    ├── CheckpointError        a checkpoint moved backwards or past the last event
    ├── StaleEpoch             a write carrying an outdated fencing epoch
    ├── OwnedElsewhere         another live process runs the session
    ├── LimitExceeded          a configured limit refused the request
    ├── TokenNotFound          no active access token by that name (acpctl tokens revoke)
    ├── BudgetExceeded         a token or cost budget stopped the session (or its tree, batch)
    ├── AgentStartFailed       the agent process could not be started or initialized
    ├── AgentProtocolError     the agent broke the protocol (garbage, oversized frame, ...)
    │   └── AgentExited        the agent process ended while a request was in flight
    ├── StoreError             the database could not be used (locked, corrupt, not SQLite)
    │   ├── StoreUnavailable   a write refused for now (lock held, disk full, I/O): retryable
    │   ├── StoreDamaged       the file is damaged (truncated, malformed pages): not retryable
    │   └── SchemaTooNew       the file was migrated by a newer acpctl (store/migrate.py)
    │
    │   defined next to the code that raises them:
    ├── AgentCommandError      an agent command that cannot be parsed (control_plane/agents/)
    │   └── UnknownAgent       a name that is no configured, registry or runnable agent
    ├── AgentNotInstalled      a registry agent nothing here can run (control_plane/agents/)
    ├── WorkspaceError         a worktree not made, set up or checkpointed (actors/workspace/)
    ├── ForkRefused            a fork point that is no finished turn (store/ops/fork.py)
    ├── ConfigError            a bad configuration file or value (control_plane/config.py)
    ├── TaskFileError          a bad batch task file (control_plane/batch/tasks.py)
    ├── SinkUnavailable        a sink refused events; delivery retries (actors/delivery/service.py)
    ├── RecorderStopped        a recorder's protocol loop stopped (actors/session/recorder.py)
    ├── BridgeRefused          a subagent tool request refused (control_plane/subagents/rules.py)
    ├── MetricsAddressError    a --metrics value that is not HOST:PORT (control_plane/metrics.py)
    ├── ListenRefused          bad or unsafe --listen options (control_plane/remote/run.py)
    ├── OutboxOverflow         a client stopped reading: cut off (control_plane/remote/outbox.py)
    ├── AttachRefused          the server refused attach's token or session (remote/attach.py)
    ├── PermissionAlreadyAnswered  an answer to a request settled first (permission_errors.py)
    ├── PermissionNotFound     no permission request by that id in that session (same module)
    ├── PermissionAnswerInvalid    an answer that is none of the request's options (same module)
    ├── SearchQueryError       a search query with no word in it (store/search_query.py)
    ├── TimeSpecError          a duration or date that cannot be read (control_plane/timespec.py)
    └── TranscriptFormatError  a transcript line that is not v1-v3 (protocol/transcript/reader.py)

Every exception class in the product is in this tree except ``store.faults.InjectedFault``,
which stands in for a crash (tests/unit/test_public_api.py checks both).

The tree lives in ``state_machines`` only because that is the bottom of the import graph
(``control_plane -> actors -> {protocol, store} -> state_machines``): every layer can raise
these without importing a layer above it.
"""

from __future__ import annotations

from typing import Any


class ControlPlaneError(Exception):
    """Root of every error the control plane raises on purpose."""


class IllegalTransition(ControlPlaneError):
    """An event has no entry in a state machine's table; the state did not change."""

    def __init__(self, machine: str, state: str, event: str, subject: str | None = None) -> None:
        self.machine = machine
        self.state = state
        self.event = event
        self.subject = subject
        where = f" ({subject})" if subject else ""
        super().__init__(f"{machine}{where}: event {event!r} is not allowed in state {state!r}")


class SessionNotFound(ControlPlaneError):
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"no session with id {session_id!r}")


class CommandNotFound(ControlPlaneError):
    def __init__(self, command_id: str) -> None:
        self.command_id = command_id
        super().__init__(f"no command with id {command_id!r}")


class TokenNotFound(ControlPlaneError):
    """No access token (not revoked) with that name or id."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no access token named {name!r}")


class IdempotencyConflict(ControlPlaneError):
    """The idempotency key was used before with a different kind or payload."""

    def __init__(self, key: str, scope: str, existing_id: str) -> None:
        self.key = key
        self.scope = scope
        self.existing_id = existing_id
        super().__init__(
            f"idempotency key {key!r} was already used in {scope} for a different request "
            f"(existing {existing_id}); use a new key for a new request"
        )


class SessionClosed(ControlPlaneError):
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id!r} is closed and accepts no commands")


class CheckpointError(ControlPlaneError):
    def __init__(self, binding_id: str, current: int, requested: int, last_event: int) -> None:
        self.binding_id = binding_id
        self.current = current
        self.requested = requested
        self.last_event = last_event
        super().__init__(
            f"checkpoint of binding {binding_id!r} cannot move from {current} to {requested} "
            f"(last committed event seq is {last_event})"
        )


class StaleEpoch(ControlPlaneError):
    def __init__(self, session_id: str, epoch: int) -> None:
        self.session_id = session_id
        self.epoch = epoch
        super().__init__(
            f"write to session {session_id!r} carries fencing epoch {epoch}, "
            "which is no longer current: another process owns the session"
        )


class OwnedElsewhere(ControlPlaneError):
    def __init__(self, session_id: str, owner: str) -> None:
        self.session_id = session_id
        self.owner = owner
        super().__init__(f"session {session_id!r} is run by another live process ({owner})")


class LimitExceeded(ControlPlaneError):
    def __init__(self, limit: str, value: int, detail: str = "") -> None:
        self.limit = limit
        self.value = value
        super().__init__(f"limit {limit}={value} exceeded" + (f": {detail}" if detail else ""))


class BudgetExceeded(ControlPlaneError):
    """A budget stopped the session: its running turn was cancelled, and prompts (and new
    children) are refused from then on, across restarts. ``budget`` names it (``session
    tokens``, ``tree cost_usd``, ``batch tokens``), with its ``limit`` and what was ``used``."""

    def __init__(self, session_id: str, budget: str, limit: float, used: float) -> None:
        self.session_id = session_id
        self.budget = budget
        self.limit = limit
        self.used = used
        super().__init__(
            f"session {session_id} is stopped by its {budget} budget: {used:g} used of {limit:g}"
        )


class _AgentFailure(ControlPlaneError):
    """What the agent errors share: the session, and the agent's own JSON-RPC error
    (``{"code", "message", "data"}``) when it answered with one, passed through to clients
    unchanged (-32000 "Authentication required" stays -32000)."""

    def __init__(
        self,
        message: str,
        session_id: str | None = None,
        agent_error: dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.agent_error = agent_error
        super().__init__(message)


class AgentStartFailed(_AgentFailure):
    """The agent could not be started (or refused to start a session)."""


class AgentProtocolError(_AgentFailure):
    """The agent broke the protocol, died, or answered a request with an error."""


class AgentExited(AgentProtocolError):
    def __init__(
        self,
        exit_code: int | None,
        stderr_tail: list[str],
        session_id: str | None = None,
        reason: str = "",
    ) -> None:
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail
        tail = f"; stderr ends: {stderr_tail[-1]!r}" if stderr_tail else ""
        super().__init__(
            f"agent process exited with code {exit_code}{' (' + reason + ')' if reason else ''}"
            f"{tail}",
            session_id,
        )


class StoreError(ControlPlaneError):
    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)


class StoreUnavailable(StoreError):
    """A write the store could not take *for now*: its lock held elsewhere past the lock
    timeout, the disk full, an I/O error. Nothing of it was written; the same write may
    succeed later, and the control plane's own lifecycle writes are retried until it does."""


class StoreDamaged(StoreError):
    """The store file is damaged under the open store (truncated, overwritten pages: SQLite's
    "database disk image is malformed"). Not retryable: from the first one on, the process
    refuses every write (they could land on top of damage); reads raise it too."""
