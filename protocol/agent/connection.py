"""One session on an agent process: the part of an ACP connection that is the session's own.

The process, its raw tap and its SDK connection are an ``AgentHost`` (host.py). A connection
has one of its own (the default), or shares one through a pool of hosts (``HostSource``,
``actors/agent_pool.py``): the session's ``session/update`` frames, permission requests and
file and terminal requests reach it by its ACP session id either way. What is the session's
own: its recorder, its permission broker, its confined file access and terminals, its ACP
session id and its turns.

All methods run on the protocol loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from acp.client.connection import ClientSideConnection
from acp.schema import AgentCapabilities, InitializeResponse

from protocol.agent.client import ControlPlaneClient, FsForward
from protocol.agent.fs import Confinement
from protocol.agent.host import AgentHost
from protocol.agent.permissions import PermissionBroker
from protocol.agent.prestart import Prestarted
from protocol.agent.sessions import SessionRequests
from protocol.agent.tap import RawTap
from protocol.agent.terminals import TerminalManager
from protocol.agent.types import (
    AgentLaunch,
    Pulling,
    Recorder,
    TurnResult,
)
from protocol.agent.usage import reported_usage
from state_machines.errors import AgentProtocolError
from state_machines.event_kinds import EventKind

T = TypeVar("T")
log = logging.getLogger(__name__)

# How long a session leaving a shared process waits for its session/close.
LEAVE_TIMEOUT_S = 5.0


class HostSource(Protocol):
    """Shared agent processes (``actors/agent_pool.py``)."""

    async def acquire(
        self,
        launch: AgentLaunch,
        capacity: int,
        attach: Callable[[AgentHost, bool], None],
        take_prestarted: Callable[[], Prestarted | None] | None = None,
    ) -> AgentHost: ...

    async def release(self, host: AgentHost, kill: bool = False) -> None: ...


class AgentConnection(SessionRequests):
    def __init__(
        self,
        launch: AgentLaunch,
        recorder: Recorder,
        permissions: PermissionBroker,
        on_exit: Callable[[int | None], None] | None = None,
        fs_forward: FsForward | None = None,
        prestarted: Prestarted | None = None,
        hosts: HostSource | None = None,
        sessions_per_process: int = 1,
        take_prestarted: Callable[[], Prestarted | None] | None = None,
    ) -> None:
        if prestarted is not None:  # its stderr went to the log it was started with
            launch = replace(launch, stderr_path=prestarted.stderr_path or launch.stderr_path)
        self.launch = launch
        self._recorder = recorder
        self.permissions = permissions
        self._on_exit = on_exit
        confinement = Confinement(launch.cwd, launch.additional_directories)
        self.client = ControlPlaneClient(
            confinement,
            permissions,
            TerminalManager(confinement, dict(launch.env), launch.terminals_enabled),
            fs_forward,
            launch.fs_limits,
        )
        self._hosts = hosts if sessions_per_process > 1 else None
        self._capacity = sessions_per_process
        self._take_prestarted = take_prestarted
        # A process of its own is there from the start (its tap can be driven in tests);
        # a shared one is acquired in ``start``.
        self._host: AgentHost | None = None
        if self._hosts is None:
            self._host = AgentHost(launch, prestarted)
            self._attach(self._host)
        self._acp_session_id: str | None = None
        self._left = False
        # Set at start: this session joined a shared process that was already running.
        self.joined_running_process = False

    # -- the process it is on ------------------------------------------------------------

    @property
    def host(self) -> AgentHost:
        if self._host is None:
            raise AgentProtocolError("the agent connection is not started")
        return self._host

    @property
    def shared(self) -> bool:
        return self._hosts is not None

    @property
    def _tap(self) -> RawTap:
        return self.host.tap

    @property
    def init(self) -> InitializeResponse | None:
        return None if self._host is None else self._host.init

    @property
    def pid(self) -> int | None:
        return None if self._host is None else self._host.pid

    @property
    def process_tree(self) -> dict[str, Any] | None:
        return None if self._host is None else self._host.process_tree

    @property
    def alive(self) -> bool:
        return self._host is not None and not self._left and self._host.alive

    @property
    def capabilities(self) -> AgentCapabilities:
        return AgentCapabilities() if self._host is None else self._host.capabilities

    @property
    def agent_name(self) -> str | None:
        info = None if self.init is None else self.init.agent_info
        return None if info is None else info.name

    @property
    def acp_session_id(self) -> str | None:
        return self._acp_session_id

    @acp_session_id.setter
    def acp_session_id(self, value: str | None) -> None:
        self._acp_session_id = value
        if value is not None and self._host is not None:
            self._host.router.bind(value, self._recorder)
            self._host.client.bind(value, self.client)

    def _replaying(self, on: bool, loaded: bool = True) -> None:
        self.host.router.replaying(self._recorder, on, loaded)

    async def restored_prompt(self) -> str | None:
        """The last user message of this session's ``session/load`` replay, once the replay
        has gone quiet (None: not loaded, or no user message in it)."""
        router = self.host.router
        await router.replay_settled(self._recorder)
        replayed = router.replayed(self._recorder)
        return None if replayed is None else replayed.last

    def _joined(self, host: AgentHost, running: bool) -> None:
        """On ``host`` (``running``: it was running already; else this session starts it)."""
        self.joined_running_process = running
        self._host = host
        self._attach(host)

    def _attach(self, host: AgentHost) -> None:
        if isinstance(self._recorder, Pulling):
            self._recorder.pull = host.tap.pull
        host.router.attach(self._recorder)
        host.client.attach(self.client)
        host.exit_listeners.append(self._exited)

    def _detach(self) -> None:
        host = self._host
        if host is None or self._left:
            return
        self._left = True
        host.tap.hand_over()  # what this session's agent wrote so far is recorded first
        host.router.detach(self._recorder)
        if isinstance(self._recorder, Pulling):
            self._recorder.pull = None
        host.client.detach(self.client)
        if self._exited in host.exit_listeners:
            host.exit_listeners.remove(self._exited)

    def _exited(self, code: int | None) -> None:
        if self._on_exit is not None:
            self._on_exit(code)

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> InitializeResponse:
        """The agent's process, started and initialized (or a shared one that is);
        ``AgentStartFailed`` if it cannot be."""
        if self._hosts is None:
            return await self.host.start()
        host = await self._hosts.acquire(
            self.launch, self._capacity, self._joined, self._take_prestarted
        )
        assert host.init is not None
        return host.init

    async def stop(self) -> None:
        """Orderly end: this session's terminals, then its process (closed, stdin, wait,
        terminate, kill); on a shared process the session is closed and leaves it."""
        await self.client.terminals.release_all()
        if self._hosts is None:
            await self.host.stop()
            return
        await self._leave(kill=False)

    async def kill(self) -> None:
        """Immediate end (a hung agent after the grace period). A shared process is killed
        only when no other session is on it; otherwise this session just leaves it."""
        await self.client.terminals.release_all()
        if self._hosts is None:
            await self.host.kill()
            return
        await self._leave(kill=True)

    async def _leave(self, kill: bool) -> None:
        host, hosts = self._host, self._hosts
        if host is None or hosts is None or self._left:
            return
        if not kill and host.alive:
            with contextlib.suppress(Exception):  # best effort: the agent frees the session
                await asyncio.wait_for(self.close_session(), LEAVE_TIMEOUT_S)
        self._detach()
        await hosts.release(host, kill=kill)

    # -- requests (SessionRequests' hooks) ------------------------------------------------

    def _require_conn(self) -> ClientSideConnection:
        if self._left:
            raise AgentProtocolError("this session left its agent process")
        return self.host.require_conn()

    async def _guard(self, request: Awaitable[T]) -> T:
        return await self.host.guard(request)

    def _stderr_tail(self) -> list[str]:
        return self.host.stderr_tail()

    async def prompt(
        self,
        blocks: Sequence[dict[str, Any]],
        timeout_s: float | None = None,
        grace_s: float = 5.0,
        durable: bool = True,
    ) -> TurnResult:
        """One turn. On ``timeout_s``: cancel, and kill the agent if the turn has not ended
        ``grace_s`` later (then ``AgentExited``). Returns once the turn's updates are durable;
        with ``durable=False`` as soon as the agent answered, every update handed to the
        recorder (the session actor then commits the outcome together with the last ones)."""
        conn = self._require_conn()
        session_id = self._require_session()
        await self.host.router.replay_settled(self._recorder)
        self.permissions.turn_started()
        turn = asyncio.ensure_future(
            self._guard(conn.prompt(session_id=session_id, prompt=list(blocks)))  # type: ignore[arg-type]
        )
        timed_out = False
        try:
            done, _ = await asyncio.wait({turn}, timeout=timeout_s)
            if not done:
                timed_out = True
                await self.cancel()
                done, _ = await asyncio.wait({turn}, timeout=grace_s)
                if not done:
                    self._recorder.event(
                        EventKind.TURN_TIMEOUT_KILL,
                        {"timeoutS": timeout_s, "graceS": grace_s, "pid": self.pid},
                    )
                    await self.kill()
                    if self.shared and not turn.done() and self.host.alive:
                        # It left a shared process that others still use: nobody will
                        # answer this turn now.
                        turn.cancel()
                        raise AgentProtocolError(
                            f"the turn did not end {grace_s:g}s after its cancel; the session "
                            "left its shared agent process"
                        )
            response = await turn
        finally:
            if durable:
                await self._recorder.flush()
        return TurnResult(str(response.stop_reason), reported_usage(response), timed_out)

    async def cancel(self) -> None:
        """``session/cancel``; pending permission requests are answered ``cancelled``."""
        self.permissions.cancel_pending()
        if self._host is not None and self.acp_session_id is not None and self.alive:
            with contextlib.suppress(ConnectionError, RuntimeError, AgentProtocolError):
                await self.host.require_conn().cancel(session_id=self.acp_session_id)
