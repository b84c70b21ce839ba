"""Configuration: a TOML file and environment variables, validated with pydantic.

Precedence (later wins): built-in defaults < the TOML file < ``ACPCTL_*`` environment
variables < command-line flags. The file is ``--config PATH``, else ``ACPCTL_CONFIG``, else
``$XDG_CONFIG_HOME/acpctl/config.toml`` when it exists.

    db = "~/.local/share/acpctl/acpctl.db"
    synchronous = "FULL"              # or "NORMAL"
    queue_mode = "followup"           # collect | steer | interrupt
    log_format = "text"               # or "json": one object per line on stderr
    interrupted_turns = "continue"    # or "report": a turn a crash or Ctrl-C cut off, when
                                      # the agent kept the conversation (docs/operations.md)
    continuation_prompt = "..."       # what a continued turn is sent (default: built in)

    [limits]
    max_running_turns = 16
    max_attempts = 3
    max_live_agents = 64            # idle agents beyond it are passivated, least recent first
    agent_log_max_bytes = 16777216  # an agent's stderr log is cut past it (one older part kept)
    sessions_per_agent = 1          # sessions one agent process may hold (batch default: 8)
    agent_nice = 10                 # agents run this many steps nicer than acpctl (0-19)

    [timeouts]
    turn_s = 600
    cancel_grace_s = 5
    passivate_after_s = 300
    agent_start_s = 60
    fs_s = 30                       # the longest an agent's fs read or write may take
    store_fault_s = 60              # a batch exits 1 once the store refused writes this long
    shared_agent_idle_s = 60        # a shared agent process with no sessions waits this long

    [budgets.session]                 # also [budgets.tree] and [budgets.batch]
    tokens = 2000000                  # total tokens the agent reports; and/or:
    cost_usd = 20.0                   # the cost it reports (usage_update)
    action = "stop"                   # or "warn": an event, nothing stopped

    [prices."gemini-2.5-flash"]      # by the model an agent reports, else by agent name
    input_usd_per_mtok = 0.30         # for agents that report tokens but no cost
    output_usd_per_mtok = 2.50

    [permissions]
    default = "ask"                   # allow | deny | ask
    by_kind = { read = "allow", execute = "deny" }
    ask_timeout_s = 600               # serve --listen: unanswered asks end "cancelled"

    [workspace]                       # --workspace worktree (docs/workspaces.md)
    root = "~/acpctl-workspaces"      # default: next to the store
    setup = "npm ci"                  # run in each new worktree before its agent starts
    setup_timeout_s = 1800

    [defaults]
    workspace = "none"                # or "worktree": batch tasks get one (a task may say)

    [retention]                       # acpctl gc's defaults; serve and batch run it when
    enabled = false                   # enabled (off by default: deleting data is opt-in)
    older_than = "30d"                # trees whose sessions were all updated before this
    states = ["closed", "error"]      # may also name "idle"
    archive_dir = "~/acpctl-archive"  # one verified .tar.gz per tree before it is deleted
    interval = "1h"                   # how often serve and batch run it

    [[notify]]                        # a webhook (docs/notify.md); as many as wanted
    url = "https://hooks.example/acpctl"
    events = ["permission_requested", "turn_ended", "task_failed", "budget_exceeded",
              "session_error"]
    secret_env = "ACPCTL_WEBHOOK_SECRET"  # signs each body (the value is never stored)
    format = "json"                   # or "slack", "ntfy"
    name = "phone"                    # in logs and metrics (default: hook<N>)

    [console]
    url = "https://devbox.example:8787/"  # the console's address, for webhooks' links

    [agents.claude]
    command = "npx @zed-industries/claude-code-acp"
    env = { ANTHROPIC_API_KEY = "..." }
    passthrough = ["ANTHROPIC_API_KEY"]   # or forward the host's variable instead
    cwd = "~/src/project"
    fs = true                         # advertise the client's fs/* (false for Gemini CLI)
    terminals = false                 # terminal/* for this agent (default: top-level)
    sessions_per_process = 4          # sessions one process of it may hold (default: limits)

Agent ``env`` values are read at each launch and never stored: the store keeps their names.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    Field,
    ValidationError,
    field_validator,
)

from control_plane.config_sections import (
    AgentConfig,
    Budgets,
    ConfigError,
    ConsoleConfig,
    Defaults,
    Limits,
    NodeConfig,
    NotifyHook,
    Permissions,
    PriceConfig,
    Retention,
    Timeouts,
    Tracing,
    WorkspaceConfig,
    _Strict,
)
from state_machines import QueueMode
from state_machines.interrupted_turns import DEFAULT_CONTINUATION

if TYPE_CHECKING:  # imported where used: reading the configuration needs neither
    from actors.agent_profiles import AgentProfiles
    from actors.delivery.hooks import HookSpec
    from actors.settings import RuntimeSettings
    from store import AgentSpec, StoreOptions


def store_file(value: str) -> str:
    """``--db`` / ``db``: a SQLite file path (``sqlite:///PATH`` is taken as PATH) or a
    ``postgresql://`` URL (store/location.py). Any other URL is refused: it used to become a
    local directory named after the scheme, and the run "succeeded" on a SQLite file in it."""
    if "://" not in value:
        return value  # a path: no need to import the store (the CLI starts without it)
    from store.location import check_db_value

    return check_db_value(value)  # UnsupportedLocation is a ValueError


def default_db_path() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(base, "acpctl", "acpctl.db")


class Config(_Strict):
    db: str = Field(default_factory=default_db_path)
    synchronous: Literal["FULL", "NORMAL"] = "FULL"
    queue_mode: QueueMode = QueueMode.FOLLOWUP
    terminals: bool = False
    log_format: Literal["text", "json"] = "text"  # json: one object per line (logs.py)
    # A turn a crash or Ctrl-C cut off, when the restarted agent kept the conversation:
    # "continue" sends the continuation prompt, "report" ends it interrupted (serve's
    # sessions always report: an editor shows them). store/ops/interrupted.py.
    interrupted_turns: Literal["continue", "report"] = "continue"
    continuation_prompt: str = Field(DEFAULT_CONTINUATION, min_length=1)
    limits: Limits = Field(default_factory=lambda: Limits())
    timeouts: Timeouts = Field(default_factory=lambda: Timeouts())
    permissions: Permissions = Field(default_factory=Permissions)
    budgets: Budgets = Field(default_factory=Budgets)
    tracing: Tracing = Field(default_factory=Tracing)
    node: NodeConfig = Field(default_factory=NodeConfig)
    # By the model the agent reports (Gemini CLI does), else by the configured agent name.
    prices: dict[str, PriceConfig] = Field(default_factory=dict)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    workspace: WorkspaceConfig = Field(default_factory=WorkspaceConfig)
    defaults: Defaults = Field(default_factory=Defaults)
    retention: Retention = Field(default_factory=Retention)
    # [[notify]]: webhooks told of permission requests, turn ends, failures (docs/notify.md).
    notify: list[NotifyHook] = Field(default_factory=list)
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)

    @field_validator("notify")
    @classmethod
    def _names_unique(cls, value: list[NotifyHook]) -> list[NotifyHook]:
        names = [hook.name for hook in value if hook.name is not None]
        if len(names) != len(set(names)):
            raise ValueError("two [[notify]] entries have the same name")
        return value

    @field_validator("db")
    @classmethod
    def _a_file_not_a_url(cls, value: str) -> str:
        return store_file(value)

    @property
    def db_is_url(self) -> bool:
        """A PostgreSQL URL rather than a SQLite file (the validator turned ``sqlite:///``
        URLs into paths and refused every other scheme)."""
        return "://" in self.db

    @property
    def db_path(self) -> Path:
        """The SQLite file (for a PostgreSQL URL: where a local store would be)."""
        return Path(os.path.expanduser(default_db_path() if self.db_is_url else self.db))

    @property
    def db_target(self) -> str:
        """What ``Store.open`` takes: the expanded file path, or the URL."""
        return self.db if self.db_is_url else str(self.db_path)

    def prepared_db(self) -> str:
        """``db_target``, with the directory the store (or, with PostgreSQL, this machine's
        agent logs) lives in created."""
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        return self.db_target

    def notify_hooks(self) -> tuple[HookSpec, ...]:
        """The ``[[notify]]`` entries as the delivery side holds them."""
        from actors.delivery.hooks import Format, HookSpec, NotifyType, hook_key

        return tuple(
            HookSpec(
                url=hook.url,
                events=frozenset(NotifyType(name) for name in hook.events),
                label=hook.name or f"hook{index}",
                key=hook_key(hook.name, hook.url),
                format=Format(hook.format),
                secret_env=hook.secret_env,
                timeout_s=hook.timeout_s,
                console_url=self.console.url,
            )
            for index, hook in enumerate(self.notify)
        )

    def store_options(self) -> StoreOptions:
        from store import StoreOptions, Synchronous

        return StoreOptions(
            synchronous=Synchronous(self.synchronous), max_attempts=self.limits.max_attempts
        )

    def runtime_settings(self, **overrides: Any) -> RuntimeSettings:
        from actors.settings import RuntimeSettings
        from protocol.agent.client import FsLimits
        from protocol.agent.permissions import PermissionPolicy
        from store.ops.budgets import BudgetDefaults
        from store.usage import Price

        session, tree = self.budgets.session, self.budgets.tree

        values: dict[str, Any] = {
            "max_running_turns": self.limits.max_running_turns,
            "record_interval_s": self.limits.record_interval_ms / 1000.0,
            "read_coalesce_s": self.limits.read_coalesce_ms / 1000.0,
            "turn_timeout_s": self.timeouts.turn_s,
            "cancel_grace_s": self.timeouts.cancel_grace_s,
            "passivate_after_s": self.timeouts.passivate_after_s,
            "agent_start_timeout_s": self.timeouts.agent_start_s,
            "permission_policy": PermissionPolicy(
                self.permissions.default, dict(self.permissions.by_kind)
            ),
            "terminals_enabled": self.terminals,
            "interrupted_turns": self.interrupted_turns,
            "workspace_root": (
                None if self.workspace.root is None else os.path.expanduser(self.workspace.root)
            ),
            "workspace_setup_s": self.workspace.setup_timeout_s,
            "continuation_prompt": self.continuation_prompt,
            "agent_profiles": self.agent_profiles(),
            "configured_agents": dict(self.agents),
            "fs_limits": FsLimits(self.limits.fs_max_bytes, self.timeouts.fs_s),
            "max_live_agents": self.limits.max_live_agents,
            "node_name": self.node.name,
            "node_labels": tuple(self.node.labels),
            "lease_s": self.node.lease_s,
            "agent_log_max_bytes": self.limits.agent_log_max_bytes,
            "sessions_per_agent": self.limits.sessions_per_agent,
            "agent_nice": self.limits.agent_nice,
            "shared_agent_idle_s": self.timeouts.shared_agent_idle_s,
            "retention": self.retention.scheduled(),
            "notify_hooks": self.notify_hooks(),
            "log_dir": str(self.db_path.parent / "agent-logs"),
            "budgets": BudgetDefaults(
                session=None if session is None else session.budget(),
                tree=None if tree is None else tree.budget(),
                prices={
                    name: Price(p.input_usd_per_mtok, p.output_usd_per_mtok)
                    for name, p in self.prices.items()
                },
            ),
        }
        values.update(overrides)
        return RuntimeSettings(**values)

    def agent_profiles(self) -> AgentProfiles:
        """Per agent name: the configured options, and for a registry agent the env its
        distribution sets (under the configured values), so every launch of a session
        spawned by that name gets it, after a restart too."""
        from actors.agent_profiles import AgentProfile, AgentProfiles
        from control_plane.agents.registry import registry_env

        profiles = {name: AgentProfile(env=env) for name, env in registry_env().items()}
        for name, agent in self.agents.items():
            profiles[name] = AgentProfile(
                env={**registry_env().get(name, {}), **agent.env},
                passthrough=tuple(agent.passthrough),
                fs=agent.fs,
                terminals=agent.terminals,
                sessions_per_process=agent.sessions_per_process,
            )
        return AgentProfiles(profiles)

    def agent(self, name_or_command: str | None) -> tuple[AgentSpec, str | None]:
        """An agent by configured name, ``example``, registry name, or command line
        (``control_plane/agents/resolve.py``). Returns the spec and the agent's configured
        cwd (if any)."""
        return self.resolve_agent(name_or_command)[:2]

    def resolve_agent(self, name_or_command: str | None) -> tuple[AgentSpec, str | None, str]:
        """``agent`` and where the name was found (config, bundled, registry, command)."""
        from control_plane.agents import resolve_agent

        resolved = resolve_agent(name_or_command, self.agents)
        return resolved.spec, resolved.cwd, resolved.source


ENV_MAP: dict[str, tuple[str, ...]] = {
    "ACPCTL_DB": ("db",),
    "ACPCTL_SYNCHRONOUS": ("synchronous",),
    "ACPCTL_QUEUE_MODE": ("queue_mode",),
    "ACPCTL_MAX_RUNNING_TURNS": ("limits", "max_running_turns"),
    "ACPCTL_MAX_ATTEMPTS": ("limits", "max_attempts"),
    "ACPCTL_AGENT_NICE": ("limits", "agent_nice"),
    "ACPCTL_TURN_TIMEOUT": ("timeouts", "turn_s"),
    "ACPCTL_CANCEL_GRACE": ("timeouts", "cancel_grace_s"),
    "ACPCTL_PASSIVATE_AFTER": ("timeouts", "passivate_after_s"),
    "ACPCTL_PERMISSION": ("permissions", "default"),
    "ACPCTL_LOG_FORMAT": ("log_format",),
    "ACPCTL_INTERRUPTED_TURNS": ("interrupted_turns",),
    "ACPCTL_NODE_NAME": ("node", "name"),
    "ACPCTL_NODE_LEASE": ("node", "lease_s"),
}


def _config_file(explicit: str | None) -> Path | None:
    if explicit:
        return Path(os.path.expanduser(explicit))
    if env := os.environ.get("ACPCTL_CONFIG"):
        return Path(os.path.expanduser(env))
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    candidate = Path(base) / "acpctl" / "config.toml"
    return candidate if candidate.exists() else None


def load_config(path: str | None = None, environ: dict[str, str] | None = None) -> Config:
    """The effective configuration; ``ConfigError`` with every problem listed."""
    data: dict[str, Any] = {}
    source = _config_file(path)
    if source is not None:
        try:
            data = tomllib.loads(source.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {source} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {source} is not valid TOML: {exc}") from None
    env = os.environ if environ is None else environ
    for name, where in ENV_MAP.items():
        if name in env:
            node = data
            for key in where[:-1]:
                node = node.setdefault(key, {})
            node[where[-1]] = env[name]
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        origin = f" in {source}" if source else ""
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"bad configuration{origin}: {problems}") from None


def redacted(config: Config) -> dict[str, Any]:
    """The configuration as a dict with agent env values hidden (they may hold API keys)."""
    dumped = config.model_dump(mode="json")
    for agent in dumped.get("agents", {}).values():
        agent["env"] = {k: "***" for k in agent.get("env", {})}
    from actors.delivery.hooks import masked

    for hook in dumped.get("notify", []):
        hook["url"] = masked(hook["url"])  # a Slack hook's path, an ntfy topic: tokens
    return dumped


__all__ = ["Config", "ConfigError", "load_config", "redacted"]
