"""The sections of the configuration file (``[limits]``, ``[timeouts]``, ``[agents.NAME]``...),
as pydantic models: the values, their bounds and their defaults. ``control_plane/config.py``
puts them together (``Config``) and reads the file and the environment."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from protocol.agent.permissions import Decision
from state_machines import ControlPlaneError
from state_machines.node_labels import check_node_labels, check_node_name

if TYPE_CHECKING:
    from control_plane.retention.policy import ScheduledGc
    from store.usage import Budget


class ConfigError(ControlPlaneError):
    """The configuration file or an environment variable holds a bad value."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(_Strict):
    max_running_turns: int = Field(16, ge=1, le=4096)
    max_attempts: int = Field(3, ge=1, le=100)
    # Least time between two writes of one session's agent output (see actors/session/recorder.py).
    record_interval_ms: float = Field(4.0, ge=0, le=1000)
    # The most an agent's stdout is left unread while its session's output waits (see
    # protocol/agent/tap.py); 0 reads every write at once.
    read_coalesce_ms: float = Field(1.0, ge=0, le=100)
    # The most an agent's fs/read_text_file returns or fs/write_text_file writes.
    fs_max_bytes: int = Field(16 * 1024 * 1024, ge=1024, le=1024**3)
    # Live agent processes kept by one control plane: beyond it the least recently used
    # idle sessions are passivated (their agents stopped; the next prompt starts them again).
    max_live_agents: int = Field(64, ge=1, le=100_000)
    # An agent's stderr log is cut to its last part when it grows past this (one older
    # part is kept beside it as ``.1``).
    agent_log_max_bytes: int = Field(16 * 1024 * 1024, ge=64 * 1024, le=1024**4)
    # Sessions one agent process may hold (ACP allows several per connection); 1 gives each
    # session its own process. ``acpctl batch --sessions-per-agent`` and an agent's own
    # ``sessions_per_process`` override it (docs/operations.md, "Shared agent processes").
    sessions_per_agent: int = Field(1, ge=1, le=1024)
    # Agents and their trees run this many steps nicer than the control plane (0-19): the
    # control plane keeps its CPU while agents start or build (docs/operations.md).
    agent_nice: int = Field(10, ge=0, le=19)


class Timeouts(_Strict):
    turn_s: float | None = Field(600.0, gt=0)
    cancel_grace_s: float = Field(5.0, ge=0)
    passivate_after_s: float = Field(300.0, gt=0)
    agent_start_s: float = Field(60.0, gt=0)
    # The longest an agent's file operation may take (a slow disk, a network file system).
    fs_s: float = Field(30.0, gt=0)
    # How long a batch keeps going while the store refuses every write (disk full, a lock
    # held elsewhere) before it exits 1; the rerun finishes the work.
    store_fault_s: float = Field(60.0, gt=0)
    # How long a shared agent process with no sessions left waits for the next one.
    shared_agent_idle_s: float = Field(60.0, ge=0)


class BudgetConfig(_Strict):
    """At most ``tokens`` (reported by the agent) and/or ``cost_usd``; then ``action``."""

    tokens: int | None = Field(None, ge=1)
    cost_usd: float | None = Field(None, gt=0)
    action: Literal["stop", "warn"] = "stop"

    @model_validator(mode="after")
    def _has_a_limit(self) -> BudgetConfig:
        if self.tokens is None and self.cost_usd is None:
            raise ValueError("a budget needs tokens or cost_usd")
        return self

    def budget(self) -> Budget:
        from store.usage import Budget, BudgetAction

        return Budget(self.tokens, self.cost_usd, BudgetAction(self.action))


class Budgets(_Strict):
    session: BudgetConfig | None = None  # each session (a spawn's own budget wins)
    tree: BudgetConfig | None = None  # each root and its descendants together
    batch: BudgetConfig | None = None  # all the tasks of one ``acpctl batch`` run


class PriceConfig(_Strict):
    """USD per million tokens (for agents that report tokens but no cost)."""

    input_usd_per_mtok: float = Field(ge=0)
    output_usd_per_mtok: float = Field(ge=0)


class Tracing(_Strict):
    """OpenTelemetry traces (``control_plane/tracing.py``); off unless enabled here or by
    ``OTEL_TRACES_EXPORTER``."""

    enabled: bool = False
    exporter: Literal["otlp", "console"] = "otlp"
    endpoint: str | None = None  # OTLP/HTTP traces URL; unset: the OTEL_EXPORTER_OTLP_* vars
    service_name: str = "acpctl"


class Permissions(_Strict):
    default: Decision = Decision.ASK
    by_kind: dict[str, Decision] = Field(default_factory=dict)
    # serve --listen: how long an "ask" waits for an attached client to answer (None: until
    # answered or the turn is cancelled); then it is answered "cancelled" (docs/remote.md).
    ask_timeout_s: float | None = Field(default=None, gt=0)


class NodeConfig(_Strict):
    """This process as a node of a shared store (docs/operations.md, "Running a fleet")."""

    # What placement names (Placement(node=...)); default: the host name. Letters, digits,
    # '.', '_' and '-'; ``acpctl serve --node-name`` overrides it.
    name: str | None = Field(default=None, min_length=1)
    # What it offers to placement: words ("shared-volume") or KEY=VALUE ("zone=eu-1"), one
    # value per key (state_machines/node_labels.py); ``--label`` (repeated) replaces them.
    labels: list[str] = Field(default_factory=list)
    # Its sessions are taken over this long after it stops renewing (crash, partition).
    lease_s: float = Field(15.0, ge=1.0, le=3600.0)

    @field_validator("name")
    @classmethod
    def _a_node_name(cls, value: str | None) -> str | None:
        return None if value is None else check_node_name(value)

    @field_validator("labels")
    @classmethod
    def _labels_of_a_node(cls, value: list[str]) -> list[str]:
        return list(check_node_labels(value))


class WorkspaceConfig(_Strict):
    """``[workspace]``: where worktree workspaces are made and how they are set up
    (docs/workspaces.md)."""

    # Default: a ``workspaces`` directory next to the store file.
    root: str | None = None
    # A shell command run in each new worktree before its agent starts (e.g. "npm ci").
    setup: str | None = Field(default=None, min_length=1)
    setup_timeout_s: float = Field(1800.0, gt=0)


class Defaults(_Strict):
    """``[defaults]``: what a session gets unless its spawn or task says otherwise."""

    workspace: Literal["worktree", "none"] = "none"


class AgentConfig(_Strict):
    # Unset for a registry agent (``[agents.claude]``): the registry's command, with the
    # env, passthrough, cwd... given here (docs/agents/README.md).
    command: str | list[str] | None = None
    # Values reach the agent at each launch and are never stored (the store keeps names).
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    passthrough: list[str] = Field(default_factory=list)
    cwd: str | None = None
    # Advertise the client's fs/* to this agent (Gemini CLI cannot create files through it).
    fs: bool = True
    # Offer terminal/* to this agent; unset follows the top-level ``terminals``.
    terminals: bool | None = None
    # Sessions one process of this agent may hold; unset follows limits.sessions_per_agent.
    sessions_per_process: int | None = Field(default=None, ge=1, le=1024)

    @field_validator("command")
    @classmethod
    def _not_empty(cls, value: str | list[str] | None) -> str | list[str] | None:
        if value is None:
            return None
        if not value or (isinstance(value, str) and not value.strip()):
            raise ValueError("must not be empty")
        return value


class Retention(_Strict):
    """``[retention]``: ``acpctl serve`` and ``acpctl batch`` delete old session trees every
    ``interval`` (archived first when ``archive_dir`` is set), as ``acpctl gc`` does, which
    takes its defaults from here too. Off unless ``enabled``: deleting data is never a
    default (docs/store.md, "Retention and archive")."""

    enabled: bool = False
    older_than: str = "30d"
    states: list[str] = Field(default_factory=lambda: ["closed", "error"])
    archive_dir: str | None = None
    interval: str = "1h"
    include_imported: bool = False  # imported transcripts too (kept by default)

    @field_validator("older_than", "interval")
    @classmethod
    def _a_duration(cls, value: str, info: ValidationInfo) -> str:
        from control_plane.retention.policy import RetentionRefused, parse_duration

        try:
            seconds = parse_duration(value)
        except RetentionRefused as exc:
            raise ValueError(str(exc)) from None
        if info.field_name == "interval" and seconds <= 0:
            raise ValueError("must be longer than 0s")
        return value

    @field_validator("states")
    @classmethod
    def _known_states(cls, value: list[str]) -> list[str]:
        from control_plane.retention.policy import RetentionRefused, parse_states

        try:
            return list(parse_states(value))
        except RetentionRefused as exc:
            raise ValueError(str(exc)) from None

    def scheduled(self) -> ScheduledGc | None:
        """What serve and batch run on their schedule; None unless enabled."""
        if not self.enabled:
            return None
        from pathlib import Path

        from control_plane.retention.policy import RetentionPolicy, ScheduledGc, parse_duration

        archive = None if self.archive_dir is None else Path(self.archive_dir).expanduser()
        policy = RetentionPolicy(
            self.older_than,
            tuple(self.states),
            archive,
            include_imported=self.include_imported,
        )
        return ScheduledGc(policy, parse_duration(self.interval))


_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_HOOK_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


def _http_url(value: str, what: str) -> str:
    """An absolute http(s) URL with a host; the message never repeats the URL (it may hold a
    token: an ntfy topic, a Slack hook's path)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise ValueError(f"{what} is not a URL") from None
    spaced = any(c.isspace() for c in value)
    if parts.scheme not in ("http", "https") or not parts.hostname or spaced:
        raise ValueError(f"{what} must be an http:// or https:// URL with a host")
    return value


class NotifyHook(_Strict):
    """One ``[[notify]]`` entry: a webhook told of the events it lists (docs/notify.md)."""

    url: str = Field(repr=False)  # may hold a token: never in logs, metrics or errors
    events: list[str] = Field(
        default_factory=lambda: [
            "permission_requested",
            "turn_ended",
            "task_failed",
            "budget_exceeded",
            "session_error",
        ],
        min_length=1,
    )
    # The name of the variable holding the HMAC secret; its value is never stored.
    secret_env: str | None = Field(default=None, pattern=_ENV_NAME)
    format: Literal["json", "slack", "ntfy"] = "json"
    # What logs and metric labels call it (default: hook<N>, its position from 0); also
    # what its checkpoint is kept by, so a renamed hook starts again at the log's end.
    name: str | None = Field(default=None, pattern=_HOOK_NAME)
    timeout_s: float = Field(10.0, gt=0, le=300)

    @field_validator("url")
    @classmethod
    def _a_url(cls, value: str) -> str:
        return _http_url(value, "url")

    @field_validator("events")
    @classmethod
    def _known_events(cls, value: list[str]) -> list[str]:
        from actors.delivery.hooks import LOG_TYPES

        known = [t.value for t in LOG_TYPES]
        unknown = [name for name in value if name not in known]
        if unknown:
            raise ValueError(f"unknown event {unknown[0]!r} (known: {', '.join(known)})")
        return list(dict.fromkeys(value))


class ConsoleConfig(_Strict):
    """``[console]``: where people open the web console, for the links webhooks carry
    (``serve --listen`` may listen on 0.0.0.0 or behind a proxy: its address is no link)."""

    url: str | None = None

    @field_validator("url")
    @classmethod
    def _a_url(cls, value: str | None) -> str | None:
        return None if value is None else _http_url(value, "url")
