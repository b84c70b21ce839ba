"""One agent process and its ACP connection, serving one session or several.

Built on the SDK's stdio transport (``spawn_stdio_transport``, the same spawn and shutdown that
``spawn_agent_process`` uses) plus ``connect_to_agent``, with one addition: a *raw tap*
between the child's stdout and the SDK reader. The tap sees every line before the SDK does,
so it can

- hand each ``session/update`` frame to the recorder of its session verbatim and in wire
  order (``frame_router.py``), and only there (the SDK would run every notification as its
  own task, validate it into typed models and drop update kinds its models do not know: work
  the control plane has no use for, and the largest per-frame cost of a streaming turn);
- refuse a frame over ``max_frame_bytes`` or a line that is not a JSON object, which the SDK
  would buffer without bound or silently skip; either ends the process with a typed
  ``AgentProtocolError`` and an event in every session on it.

Each session on the process is an ``AgentConnection`` (connection.py); ACP lets one connection
hold several sessions (``session/new`` per session, each with its own cwd). Whether a process
is shared is the agent pool's decision (``actors/agent_pool.py``).

All methods run on the protocol loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, TypeVar

from acp import PROTOCOL_VERSION, RequestError, connect_to_agent
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    InitializeRequest,
    InitializeResponse,
)

from protocol.agent import sdk_logging
from protocol.agent.frame_router import FrameRouter
from protocol.agent.prestart import Prestarted
from protocol.agent.proc_tree import agent_pgid_of, boot_id, process_start_time
from protocol.agent.process import AgentProcess, agent_transport
from protocol.agent.routing_client import RoutingClient
from protocol.agent.stderr_log import StderrLog, tail_lines
from protocol.agent.tap import RawTap
from protocol.agent.types import AgentLaunch
from protocol.secrets import Redactor
from state_machines.errors import AgentExited, AgentProtocolError, AgentStartFailed
from state_machines.event_kinds import EventKind

T = TypeVar("T")
log = logging.getLogger(__name__)

CLIENT_INFO = Implementation(name="acp-control-plane", title="ACP control plane", version="0.1.0")


def client_capabilities(launch: AgentLaunch) -> ClientCapabilities:
    return ClientCapabilities(
        fs=FileSystemCapabilities(read_text_file=launch.fs, write_text_file=launch.fs),
        terminal=launch.terminals_enabled,
    )


def initialize_params(launch: AgentLaunch) -> dict[str, Any]:
    """The params of the ``initialize`` a connection sends the agent of ``launch`` (as the
    SDK serialises them), for an exchange done ahead of the session (``prestart.py``)."""
    request = InitializeRequest(
        protocol_version=PROTOCOL_VERSION,
        client_capabilities=client_capabilities(launch),
        client_info=CLIENT_INFO,
    )
    return request.model_dump(mode="json", by_alias=True, exclude_none=True)


class AgentHost:
    def __init__(
        self, launch: AgentLaunch, prestarted: Prestarted | None = None, shared: bool = False
    ) -> None:
        sdk_logging.install()  # unknown update kinds are recorded raw, not errors
        self.launch = launch
        self.shared = shared
        self._prestarted = prestarted
        self.router = FrameRouter(shared)
        self.client = RoutingClient(shared)
        self._stack = AsyncExitStack()
        self._conn: ClientSideConnection | None = None
        self._process: AgentProcess | None = None
        self._reaper_start: int | None = None
        self._agent_pgid: int | None = None
        self.failure: AgentProtocolError | None = None
        self.stopping = False
        self.tap = RawTap(
            self.router,
            launch.max_frame_bytes,
            self._fail,
            launch.read_coalesce_s,
            self.router.holding,
            self.router.answer_coming,
        )
        self._exited = asyncio.Event()
        self.init: InitializeResponse | None = None
        # Called with the exit code when the process ends unexpectedly: one per session.
        self.exit_listeners: list[Callable[[int | None], None]] = []
        self.sessions = 0  # sessions attached (the pool's count)

    # -- what it is ----------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The agent's own pid (its reaper's while the agent is not known yet)."""
        if self._agent_pgid is not None:
            return self._agent_pgid  # the agent leads its own process group
        return None if self._process is None else self._process.pid

    @property
    def process_tree(self) -> dict[str, Any] | None:
        """What identifies the agent's process tree across a crash of this process (stored
        with each session on it, so recovery can kill leftovers): the reaper's pid and start
        time, the agent's process group, and the host and boot they belong to."""
        if self._process is None or self._reaper_start is None:
            return None
        return {
            "host": socket.gethostname(),
            "bootId": boot_id(),
            "reaperPid": self._process.pid,
            "reaperStart": self._reaper_start,
            "pgid": self._agent_pgid,
        }

    def is_tree(self, tree: dict[str, Any] | None) -> bool:
        """Whether a stored process tree is this (live) process's."""
        mine = self.process_tree
        return (
            self.alive
            and mine is not None
            and tree is not None
            and tree.get("reaperPid") == mine["reaperPid"]
            and tree.get("reaperStart") == mine["reaperStart"]
        )

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None

    @property
    def capabilities(self) -> AgentCapabilities:
        if self.init is None or self.init.agent_capabilities is None:
            return AgentCapabilities()
        return self.init.agent_capabilities

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> InitializeResponse:
        """Spawn the agent and ``initialize``; ``AgentStartFailed`` if either fails."""
        try:
            self.init = await self._start()
        except BaseException as exc:
            self.stopping = True
            await self._close_stack()
            if isinstance(exc, asyncio.CancelledError):
                raise
            if isinstance(exc, AgentStartFailed):
                raise
            raise AgentStartFailed(
                f"agent {self.launch.command[0]!r} failed to start: {exc}"
            ) from exc
        return self.init

    async def _start(self) -> InitializeResponse:
        launch = self.launch
        params = initialize_params(launch)
        prestarted = self._prestarted
        handshake = None if prestarted is None else prestarted.handshake
        if prestarted is not None and handshake is not None and handshake.params != params:
            # Initialized with other client capabilities, and initialize is once a process.
            prestarted.discard()
            self._prestarted, handshake = None, None
        # The cap on the stderr log, also for an adopted process (its log is the one it was
        # started with). Closed last, once the agent is gone: a final check of the size.
        stderr_log = StderrLog(launch.stderr_path, launch.stderr_max_bytes)
        self._stack.push_async_callback(stderr_log.aclose)
        transport = agent_transport(launch, self._prestarted, self._stack)
        try:
            entered: tuple[asyncio.StreamReader, asyncio.StreamWriter, AgentProcess]
            entered = await self._stack.enter_async_context(transport)
        except OSError as exc:
            raise AgentStartFailed(f"cannot run {launch.command[0]!r}: {exc}") from exc
        reader, writer, process = entered
        self._process = process
        self._reaper_start = process_start_time(process.pid)
        tapped = asyncio.StreamReader(limit=1024 * 1024)
        self.tap.hook(reader, tapped)
        watcher = asyncio.create_task(self._watch(process), name="acp-process-watch")
        stderr_log.watch()
        self._stack.push_async_callback(_cancel_tasks, watcher)
        # Duck-typed on purpose (see protocol/agent/client.py), hence not an ``acp.Client`` subtype.
        self._conn = connect_to_agent(
            self.client,  # type: ignore[arg-type]
            writer,
            tapped,
            use_unstable_protocol=True,
        )
        self._stack.push_async_callback(self._conn.close)
        if handshake is not None:  # asked before the session existed (serve's initialize)
            init = InitializeResponse.model_validate(handshake.answer)
            self._agent_pgid = agent_pgid_of(process.pid, timeout_s=0)
            return init
        try:
            init = await self.guard(
                self._conn.initialize(
                    protocol_version=PROTOCOL_VERSION,
                    client_capabilities=client_capabilities(launch),
                    client_info=CLIENT_INFO,
                )
            )
        except AgentProtocolError as exc:
            raise AgentStartFailed(
                f"agent failed during initialize: {exc}", agent_error=exc.agent_error
            ) from exc
        # The agent answered, so it runs: its group is found at once (no wait on the loop).
        self._agent_pgid = agent_pgid_of(process.pid, timeout_s=0)
        return init

    async def stop(self) -> None:
        """Orderly end: close the connection and stdin, wait, then terminate, then kill."""
        self.stopping = True
        await self._close_stack()

    async def kill(self) -> None:
        """Immediate end (a hung agent after the grace period)."""
        self.stopping = True
        if self.alive and self._process is not None:
            # SIGTERM, not SIGKILL: the reaper kills the agent's whole tree at once on it,
            # while a SIGKILLed reaper could not (the agent's descendants would live on).
            with contextlib.suppress(ProcessLookupError):
                self._process.terminate()
        await self._close_stack()

    async def _close_stack(self) -> None:
        # The SDK's close can report the pipe it is closing as reset when the agent is
        # already gone; the process is being ended either way.
        with contextlib.suppress(ConnectionError):
            await self._stack.aclose()

    def _fail(self, message: str) -> None:
        self.tap.hand_over()  # what came before the failure is recorded before it
        if self.failure is None:
            self.failure = AgentProtocolError(message)
            self.router.event(EventKind.AGENT_PROTOCOL_ERROR, {"error": message})
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.terminate()  # the reaper kills the tree (see kill())

    async def _watch(self, process: AgentProcess) -> None:
        code = await process.wait()
        self._exited.set()
        if not self.stopping:
            self.router.event(
                EventKind.AGENT_EXITED,
                {"exitCode": code, "stderrTail": self.stderr_tail(), "expected": False},
            )
            for listener in list(self.exit_listeners):
                listener(code)

    # -- requests ------------------------------------------------------------------------

    def require_conn(self) -> ClientSideConnection:
        if self._conn is None:
            raise AgentProtocolError("the agent connection is not started")
        if self.failure is not None:
            raise self.failure
        return self._conn

    async def guard(self, request: Awaitable[T]) -> T:
        """Await an ACP request; a dead connection becomes a typed error with the reason."""
        try:
            return await request
        except RequestError as exc:
            # The agent answered with an error: kept whole (code, message, data) so that a
            # client sees what the agent said (-32000 "Authentication required" stays that).
            error = exc.to_error_obj()
            detail = f"{exc}" + (f" ({exc.data})" if exc.data is not None else "")
            raise AgentProtocolError(
                f"the agent answered error {exc.code}: {detail}", agent_error=error
            ) from exc
        except (ConnectionError, RuntimeError) as exc:
            if self._process is not None:
                # The connection ends before the exit status is known; wait a moment for it,
                # longer when this side is ending the agent (its exit is certain, and on a
                # loaded machine the reaper's report of it took over 2 s once on CI).
                await self._exit_known(EXIT_AFTER_STOP_S if self.stopping else EXIT_AFTER_CLOSE_S)
            if self.failure is not None:
                raise self.failure from exc
            if self._process is not None:
                code = self._process.returncode
                if code is not None:
                    raise AgentExited(code, self.stderr_tail()) from exc
            raise AgentProtocolError(f"connection to the agent failed: {exc}") from exc

    async def _exit_known(self, within_s: float) -> None:
        """Until the agent's exit status is known, at most ``within_s``. (The status can be
        known before ``_watch`` hears of it: Python 3.11 ends a process's ``wait()`` only once
        every pipe of it closed.)"""
        process = self._process
        deadline = asyncio.get_running_loop().time() + within_s
        while process is not None and process.returncode is None and not self._exited.is_set():
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exited.wait(), min(left, 0.05))

    def stderr_tail(self) -> list[str]:
        """The end of the agent's stderr log with its secrets replaced by ***: it is stored
        (agent_exited) and quoted in errors, and an agent may print its own API key."""
        redactor = Redactor(self.launch.secret_values)
        return [redactor.redact(line) for line in tail_lines(self.launch.stderr_path)]


# How long a request whose connection closed waits for the agent's exit status: a moment
# when the agent ended on its own; longer when this side stopped or killed it.
EXIT_AFTER_CLOSE_S = 2.0
EXIT_AFTER_STOP_S = 30.0


async def _cancel_tasks(*tasks: asyncio.Task[Any]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
