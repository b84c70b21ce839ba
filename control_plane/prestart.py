"""Starting an agent before the control plane has loaded (``acpctl serve``, ``acpctl batch``).

The command knows its agent before it has imported the SDK or opened the store (about 0.6 s
of start-up): spawning the agent first thing lets the agent's own start-up (0.4 s to several
seconds) run meanwhile, and the first session that fits takes the process
(``protocol/agent/prestart.py``)."""

from __future__ import annotations

import logging
import os

from control_plane.config import Config
from protocol.agent.prestart import PrestartPool, prestart
from store import AgentSpec

log = logging.getLogger(__name__)


def prestart_agent(config: Config, spec: AgentSpec, cwd: str, label: str) -> PrestartPool:
    """The agent spawned in ``cwd`` with the environment a session's launch will compute (so
    that launch can take it); an empty pool when it cannot run (the session's own launch then
    reports why). Its stderr goes to ``agent-logs/<label>-<pid>.log``."""
    env = config.agent_profiles().environment(spec.name)
    logs = os.path.join(config.db_path.parent, "agent-logs")
    stderr_path = os.path.join(logs, f"{label}-{os.getpid()}.log")
    try:
        os.makedirs(logs, exist_ok=True)
        return PrestartPool(prestart(spec.command, cwd, env, stderr_path, config.limits.agent_nice))
    except OSError as exc:
        log.info("agent not started ahead: %s", exc)
        return PrestartPool()
