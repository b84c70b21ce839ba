"""The session requests of an agent connection: ``session/new``, restoring a session the
agent knew (resume > load > new + ``context_lost``; load first for a cut-off prompt),
``authenticate``, mode and config changes, ``session/close``. The base of
``AgentConnection`` (``connection.py``), which owns the process, the SDK connection and the
turn, and provides the hooks declared here."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from acp.client.connection import ClientSideConnection
from acp.meta import AGENT_METHODS
from acp.schema import (
    AgentCapabilities,
    AuthenticateRequest,
    ForkSessionRequest,
    LoadSessionRequest,
    NewSessionRequest,
    ResumeSessionRequest,
)
from acp.utils import serialize_params
from pydantic import BaseModel

from protocol.agent.types import (
    AgentLaunch,
    Recorder,
    SessionOpened,
)
from state_machines.errors import AgentProtocolError
from state_machines.event_kinds import EventKind

T = TypeVar("T")


class SessionRequests:
    launch: AgentLaunch
    _recorder: Recorder

    # Provided by AgentConnection.
    @property
    def acp_session_id(self) -> str | None:
        raise NotImplementedError

    @acp_session_id.setter
    def acp_session_id(self, value: str | None) -> None:
        raise NotImplementedError

    def _replaying(self, on: bool, loaded: bool = True) -> None:
        """While a session/load replays: its updates are not recorded (the log has them).
        ``loaded`` (when off): the load succeeded, so a replay may still trail its answer."""
        raise NotImplementedError

    def _require_conn(self) -> ClientSideConnection:
        raise NotImplementedError

    async def _guard(self, request: Awaitable[T]) -> T:
        raise NotImplementedError

    @property
    def capabilities(self) -> AgentCapabilities:
        raise NotImplementedError

    @property
    def alive(self) -> bool:
        raise NotImplementedError

    async def _session_request(self, method: str, request: BaseModel) -> dict[str, Any]:
        """Send session/new, load or resume and return the agent's answer exactly as sent:
        the SDK's response models drop what they do not know yet (``models``, the session
        model picker), and the control plane passes what the agent offers on unchanged.
        Uses the SDK's JSON-RPC connection under its typed one for that."""
        conn = self._require_conn()
        raw = await self._guard(conn._conn.send_request(method, serialize_params(request)))
        return raw if isinstance(raw, dict) else {}

    async def authenticate(self, method_id: str) -> dict[str, Any]:
        """Forward a client's ``authenticate``; the agent's answer as sent."""
        conn = self._require_conn()
        params = serialize_params(AuthenticateRequest(method_id=method_id))
        raw = await self._guard(conn._conn.send_request(AGENT_METHODS["authenticate"], params))
        return raw if isinstance(raw, dict) else {}

    async def new_session(self, mcp_servers: Sequence[Any] = ()) -> SessionOpened:
        request = NewSessionRequest(
            cwd=self.launch.cwd,
            additional_directories=list(self.launch.additional_directories) or None,
            mcp_servers=list(mcp_servers),
        )
        return await self._open(AGENT_METHODS["session_new"], request, "new")

    async def _open(self, method: str, request: BaseModel, how: str) -> SessionOpened:
        """session/new or session/fork: the agent's answer names the new session."""
        response = await self._session_request(method, request)
        session_id = response.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            raise AgentProtocolError(f"{method} answered without a sessionId: {response!r}")
        self.acp_session_id = session_id
        return SessionOpened(session_id, how, response)

    def can_fork(self) -> bool:
        caps = self.capabilities.session_capabilities
        return caps is not None and caps.fork is not None

    async def fork_session(
        self, acp_session_id: str, mcp_servers: Sequence[Any] = ()
    ) -> SessionOpened:
        """``session/fork`` of a session the agent knows: a new session of the agent with
        that one's conversation (the caller checks ``can_fork``)."""
        request = ForkSessionRequest(
            session_id=acp_session_id,
            cwd=self.launch.cwd,
            additional_directories=list(self.launch.additional_directories) or None,
            mcp_servers=list(mcp_servers),
        )
        return await self._open(AGENT_METHODS["session_fork"], request, "forked")

    async def restore_session(
        self, acp_session_id: str, mcp_servers: Sequence[Any] = (), prefer_load: bool = False
    ) -> SessionOpened:
        """Reattach to a session the agent knew: resume if advertised, else load (its replay
        is not recorded again: it is already in the log), else a new session and a
        ``context_lost`` event carrying the agent's own reason. ``prefer_load``: load if
        advertised, for its replay (what the restored conversation holds: whether a prompt
        a crash cut off is in it, store/ops/interrupted.py)."""
        caps = self.capabilities
        extra = list(self.launch.additional_directories) or None
        reason = "the agent supports neither session/resume nor session/load"
        agent_error: dict[str, Any] | None = None
        resumes = caps.session_capabilities is not None and bool(caps.session_capabilities.resume)
        try:
            if resumes and not (prefer_load and caps.load_session):
                response = await self._session_request(
                    AGENT_METHODS["session_resume"],
                    ResumeSessionRequest(
                        session_id=acp_session_id,
                        cwd=self.launch.cwd,
                        additional_directories=extra,
                        mcp_servers=list(mcp_servers),
                    ),
                )
                self.acp_session_id = acp_session_id
                return SessionOpened(acp_session_id, "resumed", response)
            if caps.load_session:
                # Bound before the request: the replay's frames name this id, and must be
                # recognised (and dropped) as the replay, not held for a session to come.
                self.acp_session_id = acp_session_id
                self._replaying(True)
                loaded = False
                try:
                    response = await self._session_request(
                        AGENT_METHODS["session_load"],
                        LoadSessionRequest(
                            cwd=self.launch.cwd,
                            session_id=acp_session_id,
                            mcp_servers=list(mcp_servers),
                            additional_directories=extra,
                        ),
                    )
                    loaded = True
                finally:
                    self._replaying(False, loaded)
                return SessionOpened(acp_session_id, "loaded", response)
        except AgentProtocolError as exc:
            if exc.agent_error is None:
                raise  # the connection failed: not something a new session would mend
            reason = f"the agent could not restore session {acp_session_id}: {exc}"
            agent_error = exc.agent_error
        opened = await self.new_session(mcp_servers)
        lost: dict[str, Any] = {"reason": reason, "previousAcpSessionId": acp_session_id}
        if agent_error is not None:
            lost["agentError"] = agent_error
        self._recorder.event(EventKind.CONTEXT_LOST, lost)
        return SessionOpened(opened.acp_session_id, "context_lost", opened.response)

    async def set_mode(self, mode_id: str) -> dict[str, Any]:
        conn = self._require_conn()
        response = await self._guard(
            conn.set_session_mode(session_id=self._require_session(), mode_id=mode_id)
        )
        return _dump(response)

    async def set_config_option(self, config_id: str, value: str | bool) -> dict[str, Any]:
        conn = self._require_conn()
        response = await self._guard(
            conn.set_config_option(
                config_id=config_id, session_id=self._require_session(), value=value
            )
        )
        return _dump(response)

    async def close_session(self) -> bool:
        """``session/close`` where advertised; returns whether it was sent."""
        caps = self.capabilities.session_capabilities
        if caps is None or not caps.close or self.acp_session_id is None or not self.alive:
            return False
        conn = self._require_conn()
        await self._guard(conn.close_session(session_id=self.acp_session_id))
        return True

    def _require_session(self) -> str:
        if self.acp_session_id is None:
            raise AgentProtocolError("no ACP session is open on this connection")
        return self.acp_session_id


def _dump(model: Any) -> dict[str, Any]:
    if model is None:
        return {}
    dumped = model.model_dump(by_alias=True, exclude_none=True)
    return dumped if isinstance(dumped, dict) else {}
