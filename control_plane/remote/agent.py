"""The ACP agent each network connection talks to: serve's (``control_plane/serve/agent.py``)
with what several clients and reconnects need.

- Every update of a session this connection opened reaches it, whoever prompted, with its
  event position in ``params._meta.acpctl.position`` (``SessionFollow``).
- ``session/load`` and ``session/resume`` take ``_meta.acpctl.after``: only what came after
  that position is replayed, then live. Their answers carry the position reached.
- ``_acpctl/outcome`` tells a client the outcome of a prompt whose answer it never got
  (by its idempotency key).
- The connection's token is recorded as each new session's creator (for ``own`` tokens).
"""

from __future__ import annotations

import asyncio
from typing import Any

from acp import RequestError
from acp.schema import ListSessionsResponse, PromptResponse, SessionInfo

from control_plane.api import ControlPlane
from control_plane.outcome import Outcome
from control_plane.remote.follow import SessionFollow
from control_plane.remote.roles import FollowerConnection
from control_plane.serve.agent import FEED_CHECK_S, ServeAgent
from control_plane.serve.client_io import idempotency_key
from control_plane.serve.prompt_answer import prompt_response
from control_plane.serve.watch import SessionWatches
from protocol.face.replay import current_setup
from protocol.face.rpc_errors import to_request_error
from state_machines import COMMAND_MACHINE, ControlPlaneError, SessionNotFound
from store import AgentSpec
from store.tokens import TokenSessions

OUTCOME_METHOD = "acpctl/outcome"  # "_acpctl/outcome" on the wire


def acpctl_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The ``acpctl`` object of a request's ``_meta`` (the SDK spreads ``_meta`` into the
    handler's keyword arguments)."""
    value = meta.get("acpctl")
    return value if isinstance(value, dict) else {}


def position_after(meta: dict[str, Any]) -> int | None:
    after = acpctl_meta(meta).get("after")
    if after is None:
        return None
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise RequestError.invalid_params({"_meta.acpctl.after": "a position (integer >= 0)"})
    return after


class RemoteServeAgent(ServeAgent):
    def __init__(
        self, cp: ControlPlane, agent: AgentSpec, conn: FollowerConnection, queue_mode: str
    ) -> None:
        super().__init__(cp, agent, None, queue_mode)
        self.conn = conn
        # Setup waits only: the follows pass every update on.
        self.watches = SessionWatches(cp, asyncio.get_running_loop(), self._nothing_to_send)
        self.session_metadata = {"createdByToken": conn.token.id}
        self.follows: dict[str, SessionFollow] = {}

    async def _nothing_to_send(self, session_id: str, updates: list[dict[str, Any]]) -> None:
        return None

    def close(self) -> None:
        self.watches.close()
        for follow in self.follows.values():
            follow.close()
        self.follows.clear()

    async def _follow(self, session_id: str, after: int | None, hold: bool = False) -> int:
        """Follow the session from ``after`` (None: from now on); the position reached."""
        old = self.follows.pop(session_id, None)
        if old is not None:
            old.close()
        follow = SessionFollow(
            self.cp,
            session_id,
            self.conn.send_updates,
            self.conn.frames,
            self.conn.permissions.noticed,
        )
        self.follows[session_id] = follow
        position = await follow.open(after, hold)
        self.conn.attached(session_id)
        return position

    # -- sessions ------------------------------------------------------------------------

    async def new_session(
        self, cwd: str, mcp_servers: Any = None, additional_directories: Any = None, **meta: Any
    ) -> dict[str, Any]:
        answer = await super().new_session(cwd, mcp_servers, additional_directories, **meta)
        session_id = answer["sessionId"]
        # Its updates wait for this answer: the connection releases them once it passed.
        position = await self._follow(session_id, 0, hold=True)
        self.conn.hold_until_answered(session_id)
        return {**answer, "_meta": {"acpctl": {"position": position}}}

    def released(self, session_id: str) -> None:
        follow = self.follows.get(session_id)
        if follow is not None:
            follow.release()

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: Any = None, **meta: Any
    ) -> dict[str, Any]:
        after = position_after(meta)
        events = await self._events(session_id)
        self._remember_mcp(session_id, mcp_servers)
        position = await self._follow(session_id, after or 0)
        return {**current_setup(events), "_meta": {"acpctl": {"position": position}}}

    async def resume_session(
        self, session_id: str, cwd: str, mcp_servers: Any = None, **meta: Any
    ) -> dict[str, Any]:
        after = position_after(meta)
        await self._session(session_id)
        self._remember_mcp(session_id, mcp_servers)
        position = await self._follow(session_id, after)
        event = await asyncio.to_thread(self.watches.latest_setup, session_id)
        setup = current_setup([] if event is None else [event])
        return {**setup, "_meta": {"acpctl": {"position": position}}}

    async def fork_session(
        self,
        session_id: str,
        cwd: str,
        mcp_servers: Any = None,
        additional_directories: Any = None,
        **meta: Any,
    ) -> dict[str, Any]:
        answer = await super().fork_session(
            session_id, cwd, mcp_servers, additional_directories, **meta
        )
        fork_id = answer["sessionId"]
        # Followed from now: its log starts with the conversation the client forked (it has
        # it); what the fork's agent sends waits for this answer, as for a new session.
        position = await self._follow(fork_id, None, hold=True)
        self.conn.hold_until_answered(fork_id)
        answer["_meta"]["acpctl"]["position"] = position
        return answer

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **meta: Any
    ) -> ListSessionsResponse:
        listed = await super().list_sessions(cwd, cursor, **meta)
        if self.conn.token.sessions is TokenSessions.ALL:
            return listed
        # An ``own`` token sees only its sessions (a page may come back short).
        mine = await asyncio.to_thread(self._created_by_this_token, listed.sessions)
        return ListSessionsResponse(sessions=mine, next_cursor=listed.next_cursor)

    def _created_by_this_token(self, sessions: list[SessionInfo]) -> list[SessionInfo]:
        token_id = self.conn.token.id
        return [
            s
            for s in sessions
            if self.cp.get(s.session_id).metadata.get("createdByToken") == token_id
        ]

    # -- turns ---------------------------------------------------------------------------

    async def prompt(self, session_id: str, prompt: list[Any], **meta: Any) -> PromptResponse:
        blocks = [b.model_dump(by_alias=True, exclude_none=True) for b in prompt]
        if session_id not in self.follows:
            await self._session(session_id)
            await self._follow(session_id, None)
        follow = self.follows[session_id]
        follow.submitting()
        command_id = None
        try:
            command = await asyncio.wrap_future(
                self.cp.submit_prompt(session_id, blocks, idempotency_key=idempotency_key(meta))
            )
            command_id = command.id
        except ControlPlaneError as exc:
            raise to_request_error(exc) from None
        finally:
            follow.submitted(command_id)
        final = await follow.outcome(command, FEED_CHECK_S)
        return prompt_response(Outcome.of(final))

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method != OUTCOME_METHOD:
            raise RequestError.method_not_found("_" + method)
        session_id, key = params.get("sessionId"), params.get("idempotencyKey")
        if not isinstance(session_id, str) or not isinstance(key, str):
            raise RequestError.invalid_params({"sessionId": "string", "idempotencyKey": "string"})
        try:
            commands = await asyncio.to_thread(self.cp.commands, session_id)
        except SessionNotFound as exc:
            raise to_request_error(exc) from None
        found = [c for c in commands if c.idempotency_key == key]
        if not found:
            return {"found": False}
        command = found[-1]
        answer: dict[str, Any] = {"found": True, "state": command.state.value}
        if command.state in COMMAND_MACHINE.final:
            try:
                response = prompt_response(Outcome.of(command))
                answer["stopReason"] = response.stop_reason
            except RequestError as exc:
                answer["error"] = exc.to_error_obj()
        return answer
