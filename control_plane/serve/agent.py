"""``acpctl serve``: the control plane as an ACP agent on stdio, in front of any ACP agent.

Any ACP client (an editor, a headless client) talks to this process as to an agent and gets
durable sessions: ``session/new`` is a durable spawn, ``session/prompt`` a durable command
whose updates stream back from the event log as they are appended, ``session/load`` replays
the stored conversation (also after this process and its backend agents were killed).

Threads: the client connection runs on this process's main asyncio loop; the control plane
(actors, the backend agents' protocol loop, the store writer) runs on its own threads. Calls
into the control plane go through ``asyncio.to_thread``; the backend's permission requests
and file access come back from the protocol loop with ``run_coroutine_threadsafe``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from typing import Any

from acp import PROTOCOL_VERSION, RequestError
from acp.agent.connection import AgentSideConnection
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    PromptCapabilities,
    PromptResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionForkCapabilities,
    SessionInfo,
    SessionListCapabilities,
    SessionResumeCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
)

from control_plane.api import ControlPlane
from control_plane.serve.backend import BackendProbe
from control_plane.serve.client_io import (
    idempotency_key,
    plain_list,
    send_queued,
    write_updates,
)
from control_plane.serve.feed import TurnFeed
from control_plane.serve.prompt_answer import prompt_response
from control_plane.serve.turn_stream import stream_turn
from control_plane.serve.watch import SessionWatches, SetupEvent
from control_plane.services import advertises_http_mcp
from protocol.face.replay import conversation_updates, current_setup
from protocol.face.rpc_errors import agent_refused, to_request_error, turn_failed
from state_machines import CommandState, ControlPlaneError, SessionNotFound
from state_machines.event_kinds import EventKind
from store import (
    AgentSpec,
)

log = logging.getLogger(__name__)

SERVE_INFO = Implementation(name="acpctl-serve", title="acp-control-plane", version="0.1.0")
LIST_PAGE = 50
# Updates per write when session/load replays a stored conversation.
REPLAY_BATCH = 256
# How long a prompt waits on its feed before checking the command in the store itself.
FEED_CHECK_S = 30.0


class ServeAgent:
    """Duck-typed ``acp.Agent``: methods not defined here answer -32601."""

    def __init__(
        self,
        cp: ControlPlane,
        agent: AgentSpec,
        out: asyncio.StreamWriter | None,
        queue_mode: str = "followup",
    ) -> None:
        self.cp = cp
        self.out = out  # the client stream on stdio (the SDK connection writes to it too)
        self.agent = agent
        self.queue_mode = queue_mode
        self.client: AgentSideConnection | None = None
        self.client_fs = False
        self.backend_init: dict[str, Any] | None = None
        self.backend = BackendProbe(cp, agent)
        self.watches = SessionWatches(cp, asyncio.get_running_loop(), self._send_queued)
        self.session_metadata: dict[str, Any] = {}  # merged into every new session's

    def on_connect(self, conn: AgentSideConnection) -> None:
        self.client = conn

    # -- initialize ----------------------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **_: Any,
    ) -> dict[str, Any]:
        fs = getattr(client_capabilities, "fs", None)
        self.client_fs = bool(fs and fs.read_text_file and fs.write_text_file)
        if self.backend_init is None:
            self.backend_init = await asyncio.to_thread(self.backend.initialize)
        caps = self.backend_init.get("agentCapabilities") or {}
        if advertises_http_mcp(self.backend_init):
            # Its first session/new will connect to the subagent tools: load them now.
            self.cp.expect_http_tools()
        prompt_caps = PromptCapabilities.model_validate(caps.get("promptCapabilities") or {})
        answer = InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=prompt_caps,
                session_capabilities=SessionCapabilities(
                    list=SessionListCapabilities(),
                    close=SessionCloseCapabilities(),
                    resume=SessionResumeCapabilities(),
                    fork=SessionForkCapabilities(),
                ),
            ),
            agent_info=SERVE_INFO,
        ).model_dump(mode="json", by_alias=True, exclude_none=True)
        # The backend's auth methods, as it sent them (kinds the SDK's models do not know
        # included): a client that gets -32000 from session/new knows how to log in.
        answer["authMethods"] = self.backend_init.get("authMethods") or []
        return answer

    async def authenticate(self, method_id: str, **_: Any) -> dict[str, Any]:
        """The client's login, carried out by a backend agent process of its own: agents
        keep what a login gives them (a token, OAuth credentials) in their own files, so
        every session's agent started afterwards finds it. The agent's answer or error is
        passed on unchanged."""
        return await asyncio.to_thread(self.backend.authenticate, method_id)

    # -- sessions ------------------------------------------------------------------------

    async def new_session(
        self, cwd: str, mcp_servers: Any = None, additional_directories: Any = None, **meta: Any
    ) -> dict[str, Any]:
        """A durable spawn; answered once the backend agent started, with what it offers
        (modes, models, config options), exactly as the agent said it. The client's MCP
        servers go to the agent at this and every later launch."""
        if not os.path.isdir(cwd):
            raise RequestError.invalid_params({"cwd": cwd, "reason": "no such directory"})
        key = idempotency_key(meta)
        metadata = {
            "additionalDirectories": list(additional_directories or []),
            "via": "serve",
            # An editor's prompt cut short by a crash is shown as interrupted, never re-run
            # behind the user's back (docs/protocol.md).
            "interruptedTurns": "report",
            **self.session_metadata,
        }
        try:
            spawned = await asyncio.to_thread(
                self.cp.spawn,
                self.agent,
                cwd,
                None,
                idempotency_key=key,
                metadata=metadata,
                queue_mode=self.queue_mode,
                mcp_servers=plain_list(mcp_servers),
            )
        except ControlPlaneError as exc:
            raise to_request_error(exc) from None
        session_id = spawned.session.id
        # Updates the agent sends right after starting (its slash commands) wait for this
        # answer: the client must know the session before it gets its updates.
        self.watches.attach(session_id, hold=True)
        try:
            setup = await self._agent_setup(session_id, fresh=spawned.created)
        finally:
            # Runs after the SDK queued this request's answer (it does so before it yields).
            asyncio.get_running_loop().call_soon(self.watches.release, session_id)
        return {"sessionId": session_id, **setup}

    async def _agent_setup(self, session_id: str, fresh: bool) -> dict[str, Any]:
        """What the session's agent offers, from its latest start (waiting for the first
        one of a new session); the agent's own error when it refused to start."""
        timeout = self.cp.settings.agent_start_timeout_s + 10
        event: SetupEvent | None = None
        if not fresh:
            event = await asyncio.to_thread(self.watches.latest_setup, session_id)
        if event is None:
            try:
                event = await self.watches.setup(session_id, timeout)
            except TimeoutError:
                raise RequestError.internal_error(
                    {"details": f"the agent did not start within {timeout:.0f}s"}
                ) from None
        prestarted = self.cp.settings.prestarted
        if prestarted is not None:
            # Taken by this session's launch, or it does not fit (another cwd): an agent
            # process must not idle for the rest of serve's life.
            await asyncio.to_thread(prestarted.close)
        if event.kind == EventKind.AGENT_START_FAILED:
            raise agent_refused(event.payload)
        setup = event.payload.get("sessionSetup")
        return dict(setup) if isinstance(setup, dict) else {}

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: Any = None, **_: Any
    ) -> dict[str, Any]:
        events = await self._events(session_id)
        self._remember_mcp(session_id, mcp_servers)
        batch: list[dict[str, Any]] = []
        for update in conversation_updates(events):
            batch.append(update)
            if len(batch) >= REPLAY_BATCH:
                await self._send_updates(session_id, batch)
                batch = []
        await self._send_updates(session_id, batch)
        self.watches.attach(session_id)
        return current_setup(events)

    async def resume_session(
        self, session_id: str, cwd: str, mcp_servers: Any = None, **_: Any
    ) -> dict[str, Any]:
        await self._session(session_id)
        self._remember_mcp(session_id, mcp_servers)
        self.watches.attach(session_id)
        event = await asyncio.to_thread(self.watches.latest_setup, session_id)
        return current_setup([] if event is None else [event])

    async def fork_session(
        self,
        session_id: str,
        cwd: str,
        mcp_servers: Any = None,
        additional_directories: Any = None,
        **meta: Any,
    ) -> dict[str, Any]:
        """A durable fork of the session at its last finished turn (``ControlPlane.fork``):
        its agent forks its own session when it advertises ``session/fork``, else is a new
        agent session sent the conversation with the first prompt; ``_meta.acpctl`` says
        which. In a workspace the fork gets a worktree of its own (its cwd, in ``_meta``)."""
        await self._session(session_id)
        try:
            forked = await asyncio.to_thread(
                functools.partial(
                    self.cp.fork,
                    session_id,
                    None,
                    idempotency_key=idempotency_key(meta),
                    metadata={
                        "via": "serve",
                        "interruptedTurns": "report",
                        **self.session_metadata,
                    },
                    mcp_servers=plain_list(mcp_servers),
                )
            )
        except ControlPlaneError as exc:
            raise to_request_error(exc) from None
        new_id = forked.session.id
        self.watches.attach(new_id, hold=True)
        try:
            setup = await self._agent_setup(new_id, fresh=forked.created)
        finally:
            asyncio.get_running_loop().call_soon(self.watches.release, new_id)
        started = await asyncio.to_thread(
            self.cp.events_of_kinds, new_id, (EventKind.AGENT_STARTED.value,)
        )
        how = started[-1].payload.get("how") if started else None
        fork_of = dict(forked.session.metadata.get("forkOf") or {})
        info = {
            "forkOf": fork_of,
            "cwd": forked.session.cwd,
            "agentForked": how == "forked",
            "seeded": how != "forked",  # the conversation goes with the first prompt
        }
        return {"sessionId": new_id, **setup, "_meta": {"acpctl": info}}

    def _remember_mcp(self, session_id: str, servers: Any) -> None:
        """A client's MCP servers on load/resume: the agent's next launch gets them."""
        if servers:
            self.cp.settings.client_mcp.remember(session_id, plain_list(servers))

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **_: Any
    ) -> ListSessionsResponse:
        page = await asyncio.to_thread(self.cp.list_sessions, None, LIST_PAGE + 1, cursor)
        if cwd is not None:
            page = [s for s in page if s.cwd == cwd]
        more = len(page) > LIST_PAGE
        page = page[:LIST_PAGE]
        return ListSessionsResponse(
            sessions=[
                SessionInfo(
                    session_id=s.id,
                    cwd=s.cwd,
                    title=s.metadata.get("title"),
                    updated_at=s.updated_at.isoformat(),
                )
                for s in page
            ],
            next_cursor=page[-1].id if more and page else None,
        )

    async def close_session(self, session_id: str, **_: Any) -> None:
        await self._session(session_id)
        await asyncio.to_thread(self.cp.close_session, session_id, "closed by the ACP client")
        # A closed session launches no agent again: its MCP credentials leave memory.
        self.cp.settings.client_mcp.forget(session_id)

    # -- turns ---------------------------------------------------------------------------

    async def prompt(self, session_id: str, prompt: list[Any], **meta: Any) -> PromptResponse:
        blocks = [b.model_dump(by_alias=True, exclude_none=True) for b in prompt]
        feed = TurnFeed(asyncio.get_running_loop())
        # Watch before enqueueing: every event of the new command is committed after this.
        feed.watch = watch = self.cp.watch_session(session_id, feed.wake)
        try:
            try:
                command = await asyncio.wrap_future(
                    self.cp.submit_prompt(session_id, blocks, idempotency_key=idempotency_key(meta))
                )
            except ControlPlaneError as exc:
                raise to_request_error(exc) from None
            assert self.out is not None
            outcome = await stream_turn(self.cp, self.out, command, feed)
        finally:
            watch.close()
        return prompt_response(outcome)

    async def cancel(self, session_id: str, **_: Any) -> None:
        try:
            await asyncio.to_thread(self.cp.cancel, session_id)
        except SessionNotFound:
            log.info("cancel for unknown session %s ignored", session_id)

    async def set_session_mode(
        self, session_id: str, mode_id: str, **meta: Any
    ) -> SetSessionModeResponse:
        await self._session(session_id)
        command = await asyncio.to_thread(
            self.cp.set_mode, session_id, mode_id, idempotency_key=idempotency_key(meta)
        )
        await self._finished(command.id)
        return SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: Any, **meta: Any
    ) -> SetSessionConfigOptionResponse:
        await self._session(session_id)
        command = await asyncio.to_thread(
            self.cp.set_config_option,
            session_id,
            config_id,
            value,
            idempotency_key=idempotency_key(meta),
        )
        result = await self._finished(command.id)
        return SetSessionConfigOptionResponse.model_validate(
            {"configOptions": result.get("configOptions", [])}
        )

    # -- helpers -------------------------------------------------------------------------

    async def _finished(self, command_id: str) -> dict[str, Any]:
        outcome = await asyncio.to_thread(self.cp.wait, command_id, 120)
        if outcome.state is not CommandState.COMPLETED:
            raise turn_failed(outcome.error or outcome.state.value)
        command = await asyncio.to_thread(self.cp.command, command_id)
        return command.result or {}

    async def _session(self, session_id: str) -> Any:
        try:
            return await asyncio.to_thread(self.cp.get, session_id)
        except SessionNotFound as exc:
            raise to_request_error(exc) from None

    async def _events(self, session_id: str) -> list[Any]:
        try:
            return await asyncio.to_thread(self.cp.events, session_id)
        except SessionNotFound as exc:
            raise to_request_error(exc) from None

    async def _send_queued(self, session_id: str, updates: list[dict[str, Any]]) -> None:
        if self.client is not None:
            await send_queued(self.client, session_id, updates)

    async def _send_updates(self, session_id: str, updates: list[dict[str, Any]]) -> None:
        assert self.out is not None
        await write_updates(self.out, session_id, updates)
