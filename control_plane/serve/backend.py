"""Serve's own backend agent processes, outside any session: the capability probe behind
``initialize`` (once per agent command; afterwards the answer comes from the store; asked of
the process started ahead for the first session when there is one, so no process is started
for it) and the process that carries out a client's ``authenticate``."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import Any

from actors.session.launch import launch_agent
from control_plane.api import ControlPlane
from protocol.agent.connection import AgentConnection
from protocol.agent.host import initialize_params
from protocol.agent.permissions import Decision, PermissionBroker, PermissionPolicy
from protocol.agent.prestart import HandshakeFailed
from protocol.agent.types import NullRecorder
from protocol.face.rpc_errors import agent_refused
from state_machines import ControlPlaneError
from store import AgentSpec

log = logging.getLogger(__name__)


class BackendProbe:
    def __init__(self, cp: ControlPlane, agent: AgentSpec) -> None:
        self.cp = cp
        self.agent = agent

    def initialize(self) -> dict[str, Any]:
        """What the backend agent answers to ``initialize``: from the store, where every
        start of that agent command records it; only the very first time, from a start of
        the agent for the purpose (then recorded too)."""
        cached = self.cp.agent_capabilities(self.agent.command)
        if cached is not None:
            return cached
        answer = self._ask_prestarted()
        if answer is not None:
            self.cp.record_agent_capabilities(self.agent.command, answer)
            return answer
        conn = self._connection("capability-probe")
        try:
            init = self.cp.start_agent_on_loop(conn, "serve's capability probe")
        except ControlPlaneError as exc:
            log.warning("backend agent did not start for the capability probe: %s", exc)
            return {}
        finally:
            self.cp.run_on_loop(conn.stop(), 30)
        answer = init.model_dump(by_alias=True, exclude_none=True)
        self.cp.record_agent_capabilities(self.agent.command, answer)
        return answer

    def _ask_prestarted(self) -> dict[str, Any] | None:
        """The answer of the agent process serve started ahead for its first session, asked
        on that process, which stays for the session (so a new store's first serve starts
        its agent once); None when there is none that fits."""
        settings = self.cp.settings
        pool = settings.prestarted
        if pool is None:
            return None
        launch = launch_agent(self.agent, os.getcwd(), "capability-probe", settings)
        try:
            return pool.initialize(
                launch.command,
                launch.env,
                initialize_params(launch),
                settings.agent_start_timeout_s,
            )
        except HandshakeFailed as exc:
            log.warning("the backend agent started ahead did not answer initialize: %s", exc)
            return None

    def _connection(self, purpose: str) -> AgentConnection:
        """A backend agent process of serve's own, outside any session (it asks nothing
        of the client: permissions are denied)."""
        settings = self.cp.settings
        launch = replace(
            launch_agent(self.agent, os.getcwd(), purpose, settings), stderr_path=os.devnull
        )
        broker = PermissionBroker(PermissionPolicy(Decision.DENY))
        return AgentConnection(launch, NullRecorder(), broker)

    def authenticate(self, method_id: str) -> dict[str, Any]:
        settings = self.cp.settings
        conn = self._connection("authenticate")
        try:
            self.cp.start_agent_on_loop(conn, "serve's authenticate")
            # A login may wait for a person (a browser flow): as long as a turn may take.
            return self.cp.run_on_loop(conn.authenticate(method_id), settings.turn_timeout_s)
        except ControlPlaneError as exc:
            agent_error = getattr(exc, "agent_error", None)
            raise agent_refused({"agentError": agent_error, "error": str(exc)}) from exc
        finally:
            self.cp.run_on_loop(conn.stop(), 30)
