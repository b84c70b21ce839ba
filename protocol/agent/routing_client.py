"""The client side of one agent process, for every session on it: each request the agent
makes (permission, files, terminals) names its session, and goes to that session's own
``ControlPlaneClient`` (its confinement, its permission broker, its terminals). A process
with one session (not shared) sends everything to that session, whatever id it names, as a
connection did before processes could be shared. Duck-typed ``acp.Client`` (see client.py)."""

from __future__ import annotations

from typing import Any

from acp import RequestError

from protocol.agent.client import ControlPlaneClient


class RoutingClient:
    def __init__(self, shared: bool) -> None:
        self.shared = shared
        self._by_acp_id: dict[str, ControlPlaneClient] = {}
        self._sessions: list[ControlPlaneClient] = []

    def attach(self, client: ControlPlaneClient) -> None:
        self._sessions.append(client)

    def bind(self, acp_session_id: str, client: ControlPlaneClient) -> None:
        self._by_acp_id[acp_session_id] = client

    def detach(self, client: ControlPlaneClient) -> None:
        if client in self._sessions:
            self._sessions.remove(client)
        for acp_id in [k for k, c in self._by_acp_id.items() if c is client]:
            del self._by_acp_id[acp_id]

    def _for(self, session_id: str) -> ControlPlaneClient:
        if not self.shared and len(self._sessions) == 1:
            return self._sessions[0]
        client = self._by_acp_id.get(session_id)
        if client is None:
            raise RequestError.invalid_params({"sessionId": session_id, "reason": "unknown"})
        return client

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        return None  # persisted by the raw tap, in wire order, verbatim

    async def request_permission(self, session_id: str, **kwargs: Any) -> Any:
        return await self._for(session_id).request_permission(session_id, **kwargs)

    async def read_text_file(self, session_id: str, **kwargs: Any) -> Any:
        return await self._for(session_id).read_text_file(session_id, **kwargs)

    async def write_text_file(self, session_id: str, **kwargs: Any) -> Any:
        return await self._for(session_id).write_text_file(session_id, **kwargs)

    async def create_terminal(self, session_id: str, **kwargs: Any) -> Any:
        return await self._for(session_id).create_terminal(session_id, **kwargs)

    async def terminal_output(self, session_id: str, **kwargs: Any) -> Any:
        return await self._for(session_id).terminal_output(session_id, **kwargs)

    async def wait_for_terminal_exit(self, session_id: str, **kwargs: Any) -> Any:
        return await self._for(session_id).wait_for_terminal_exit(session_id, **kwargs)

    async def kill_terminal(self, session_id: str, **kwargs: Any) -> Any:
        return await self._for(session_id).kill_terminal(session_id, **kwargs)

    async def release_terminal(self, session_id: str, **kwargs: Any) -> Any:
        return await self._for(session_id).release_terminal(session_id, **kwargs)
