"""``acpctl serve`` starts its backend agent before anything else is loaded."""

from __future__ import annotations

import logging
import os

from control_plane.config import Config
from protocol.agent.prestart import PrestartPool, prestart
from store import AgentSpec

log = logging.getLogger(__name__)


def prestart_backend(config: Config, spec: AgentSpec) -> PrestartPool:
    """The backend agent spawned in serve's cwd with the environment its first session's
    launch will compute (so that launch can take it); an empty pool when it cannot run (the
    session's own launch then reports why)."""
    env = config.agent_profiles().environment(spec.name)
    stderr_path = os.path.join(config.db_path.parent, "agent-logs", f"serve-{os.getpid()}.log")
    try:
        return PrestartPool(prestart(spec.command, os.getcwd(), env, stderr_path))
    except OSError as exc:
        log.info("backend agent not started ahead: %s", exc)
        return PrestartPool()
