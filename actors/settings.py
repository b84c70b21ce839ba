"""Runtime settings of the actors: limits, timeouts, agent policies."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from actors.agent_profiles import AgentProfiles
from actors.client_mcp import ClientMcpServers
from actors.delivery.hooks import HookSpec
from protocol.agent.client import FsForward, FsLimits
from protocol.agent.permissions import AskCallback, Decision, PermissionPolicy
from protocol.agent.prestart import PrestartPool
from state_machines.interrupted_turns import DEFAULT_CONTINUATION
from store import SubagentLimits
from store.ops.budgets import BudgetDefaults


def default_log_dir() -> str:
    return os.path.join(os.path.expanduser("~"), ".local", "state", "acpctl", "agent-logs")


@dataclass(frozen=True)
class RuntimeSettings:
    # Running turns across the process (sessions waiting for a slot hold no thread).
    max_running_turns: int = 16
    # Session trees: depth and open children are checked at spawn (LimitExceeded); children
    # of one parent beyond max_running_children wait in the queue.
    subagent_limits: SubagentLimits = field(default_factory=SubagentLimits)
    # Token and cost budgets for sessions and trees whose spawn set none (store/ops/budgets.py).
    budgets: BudgetDefaults = field(default_factory=BudgetDefaults)
    max_running_children: int = 4
    # A turn longer than this is cancelled; None disables the timeout.
    turn_timeout_s: float | None = 600.0
    # After a cancel (user or timeout), how long the agent gets before it is killed.
    cancel_grace_s: float = 5.0
    # An idle live session is passivated (actor and agent stopped) after this long.
    passivate_after_s: float = 300.0
    agent_start_timeout_s: float = 60.0
    # Agent processes starting at once (a start can cost seconds of CPU: a storm of them
    # on a small machine would time every one of them out).
    max_concurrent_starts: int = 4
    # Agents (and everything they start) run this many steps nicer than the control plane:
    # with agents starting or building on every core, the control plane's threads (which
    # every session's writes go through) still get a CPU at once. Only contention is
    # affected: an idle machine runs a nicer agent as fast. 0: the same priority
    # (docs/operations.md, "Agent priority").
    agent_nice: int = 10
    # How often the supervisor looks for work other processes queued or left behind.
    sweep_interval_s: float = 1.0
    # How often the sweep also queries the store for work queued by other processes or left
    # by dead owners (a scan; cheap for a few sessions, ~200 ms with a 10k backlog).
    discover_interval_s: float = 5.0
    # This process as a node of the store (actors/node_lease.py): the name placement refers
    # to (None: the host name), the labels it offers, and its lease. A node that stops
    # renewing (crash, partition, SIGSTOP) loses its sessions once the lease runs out; the
    # others take them over at their next discovery (so within lease + discover interval).
    node_name: str | None = None
    node_labels: tuple[str, ...] = ()
    lease_s: float = 15.0
    permission_policy: PermissionPolicy = field(
        default_factory=lambda: PermissionPolicy(Decision.ASK)
    )
    ask: AskCallback | None = None
    # fs/* served by an upstream client instead of locally (acpctl serve), else None.
    fs_forward: FsForward | None = None
    # MCP servers handed to each session's agent in session/new (the subagent tools), by
    # session id, the agent's process tree (ProcessTree's dict) and whether the agent
    # speaks HTTP MCP; None gives agents none.
    mcp_servers: Callable[[str, dict[str, Any] | None, bool], list[dict[str, Any]]] | None = None
    # MCP servers clients asked for, per session (values of their secrets in memory only).
    client_mcp: ClientMcpServers = field(default_factory=ClientMcpServers)
    # An agent process started ahead of its session (acpctl serve), for the first launch
    # it fits.
    prestarted: PrestartPool | None = None
    terminals_enabled: bool = False
    # Host variables forwarded to every agent by name (per-agent ones are in its profile).
    env_passthrough: tuple[str, ...] = ()
    # Per agent name: environment values, passthrough, fs and terminal options, resolved at
    # every launch (never stored; see actors/agent_profiles.py).
    agent_profiles: AgentProfiles = field(default_factory=AgentProfiles)
    # The configuration's ``[agents.NAME]`` sections: names a spawn resolves before the
    # registry (control_plane/agents/resolve.py); values are AgentConfig models.
    configured_agents: Mapping[str, Any] = field(default_factory=dict)
    # What a turn a crash or Ctrl-C cut off gets when its session is restored, unless the
    # session's metadata says (serve's "report"): "continue" or "report"
    # (store/ops/interrupted.py), and the prompt a continued turn is sent.
    interrupted_turns: str = "continue"
    # Where worktree workspaces are made (default: next to the store, set by assembly.py)
    # and the longest their setup command may run.
    workspace_root: str | None = None
    workspace_setup_s: float = 1800.0
    continuation_prompt: str = DEFAULT_CONTINUATION
    max_frame_bytes: int = 16 * 1024 * 1024
    # The least time between two writes of a session's agent output: updates arriving
    # meanwhile are committed together (one fsync, one wake-up of each watcher). Adds at most
    # this much to when an update is durable and forwarded; never delays a turn's outcome.
    record_interval_s: float = 0.004
    # While a session's recorder holds its output anyway (a write in flight, the interval's
    # timer armed), a read of its agent's stdout that held only session/update frames leaves
    # the pipe unread until the recorder's next event, at most this long (protocol/agent/
    # tap.py): a streamed turn is read a burst at a time, not one wake-up of the protocol loop
    # per update. An answer or request of the agent's waits at most this long.
    read_coalesce_s: float = 0.001
    agent_shutdown_timeout_s: float = 2.0
    # Agents' fs/read_text_file and fs/write_text_file: the most bytes and the longest time.
    fs_limits: FsLimits = field(default_factory=FsLimits)
    log_dir: str = field(default_factory=default_log_dir)
    # An agent's stderr log is cut to its newest part past this size (protocol/agent/stderr_log.py).
    agent_log_max_bytes: int = 16 * 1024 * 1024
    # Live agent processes in this control plane; beyond it the least recently used idle
    # sessions are passivated early. None: no cap (passivate_after_s alone).
    max_live_agents: int | None = 64
    # Sessions one agent process may hold at once (ACP allows several per connection); an
    # agent's own ``sessions_per_process`` wins. 1: a process per session, the default
    # where isolation matters more than start-up cost (actors/agent_pool.py, docs).
    sessions_per_agent: int = 1
    # How long a shared agent process without sessions waits for the next one.
    shared_agent_idle_s: float = 60.0
    # The ``[[notify]]`` webhooks (docs/notify.md): delivered by processes that run sessions.
    notify_hooks: tuple[HookSpec, ...] = ()
    # Their retries' backoff: the first wait's scale and the longest wait (tenacity's
    # jittered exponential), and how often a deliverer looks for other processes' events.
    notify_backoff_s: tuple[float, float] = (0.5, 60.0)
    notify_poll_s: float = 1.0
    # The ``[retention]`` schedule a process that runs sessions applies (a
    # control_plane.retention.policy.ScheduledGc; ``Any``: the actors never import the
    # control plane), or None.
    retention: Any = None

    def sessions_per_process(self, agent_name: str) -> int:
        own = self.agent_profiles.get(agent_name).sessions_per_process
        return max(1, self.sessions_per_agent if own is None else own)
