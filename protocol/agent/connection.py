"""One agent process and its ACP connection, driven from the protocol loop.

Built on the SDK's stdio transport (``spawn_stdio_transport``, the same spawn and shutdown that
``spawn_agent_process`` uses) plus ``connect_to_agent``, with one addition: a *raw tap*
between the child's stdout and the SDK reader. The tap sees every line before the SDK does,
so it can

- hand each ``session/update`` frame to the recorder verbatim and in wire order, and only to
  the recorder (the SDK would run every notification as its own task, validate it into typed
  models and drop update kinds its models do not know: work the control plane has no use
  for, and the largest per-frame cost of a streaming turn);
- refuse a frame over ``max_frame_bytes`` or a line that is not a JSON object, which the SDK
  would buffer without bound or silently skip; either ends the connection with a typed
  ``AgentProtocolError`` and an event.

All methods run on the protocol loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Any, TypeVar

from acp import PROTOCOL_VERSION, RequestError, connect_to_agent
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    InitializeResponse,
)

from protocol.agent import sdk_logging
from protocol.agent.client import ControlPlaneClient, FsForward
from protocol.agent.fs import Confinement
from protocol.agent.permissions import PermissionBroker
from protocol.agent.prestart import Prestarted
from protocol.agent.proc_tree import agent_pgid_of, boot_id, process_start_time
from protocol.agent.process import AgentProcess, agent_transport
from protocol.agent.sessions import SessionRequests
from protocol.agent.stderr_log import StderrLog, tail_lines
from protocol.agent.tap import RawTap
from protocol.agent.terminals import TerminalManager
from protocol.agent.types import (
    AgentLaunch,
    Recorder,
    TurnResult,
)
from protocol.agent.usage import reported_usage
from protocol.secrets import Redactor
from state_machines.errors import AgentExited, AgentProtocolError, AgentStartFailed
from state_machines.event_kinds import EventKind

T = TypeVar("T")
log = logging.getLogger(__name__)

CLIENT_INFO = Implementation(name="acp-control-plane", title="ACP control plane", version="0.1.0")


class AgentConnection(SessionRequests):
    def __init__(
        self,
        launch: AgentLaunch,
        recorder: Recorder,
        permissions: PermissionBroker,
        on_exit: Callable[[int | None], None] | None = None,
        fs_forward: FsForward | None = None,
        prestarted: Prestarted | None = None,
    ) -> None:
        sdk_logging.install()  # unknown update kinds are recorded raw, not errors
        if prestarted is not None:  # its stderr went to the log it was started with
            launch = replace(launch, stderr_path=prestarted.stderr_path or launch.stderr_path)
        self._prestarted = prestarted
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
        self._stack = AsyncExitStack()
        self._conn: ClientSideConnection | None = None
        self._process: AgentProcess | None = None
        self._reaper_start: int | None = None
        self._agent_pgid: int | None = None
        self._failure: AgentProtocolError | None = None
        self._stopping = False
        self._tap = RawTap(recorder, launch.max_frame_bytes, self._fail)
        self._exited = asyncio.Event()
        self.init: InitializeResponse | None = None
        self.acp_session_id: str | None = None

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The agent's own pid (its reaper's while the agent is not known yet)."""
        if self._agent_pgid is not None:
            return self._agent_pgid  # the agent leads its own process group
        return None if self._process is None else self._process.pid

    @property
    def process_tree(self) -> dict[str, Any] | None:
        """What identifies the agent's process tree across a crash of this process (stored
        with the session so recovery can kill leftovers): the reaper's pid and start time,
        the agent's process group, and the host and boot they belong to."""
        if self._process is None or self._reaper_start is None:
            return None
        return {
            "host": socket.gethostname(),
            "bootId": boot_id(),
            "reaperPid": self._process.pid,
            "reaperStart": self._reaper_start,
            "pgid": self._agent_pgid,
        }

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None

    @property
    def capabilities(self) -> AgentCapabilities:
        if self.init is None or self.init.agent_capabilities is None:
            return AgentCapabilities()
        return self.init.agent_capabilities

    @property
    def agent_name(self) -> str | None:
        info = None if self.init is None else self.init.agent_info
        return None if info is None else info.name

    async def start(self) -> InitializeResponse:
        """Spawn the agent and ``initialize``; ``AgentStartFailed`` if either fails."""
        try:
            self.init = await self._start()
        except BaseException as exc:
            self._stopping = True
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
        self._tap.hook(reader, tapped)
        watcher = asyncio.create_task(self._watch(process), name="acp-process-watch")
        capper = asyncio.create_task(stderr_log.watch(), name="acp-stderr-cap")
        self._stack.push_async_callback(_cancel_tasks, watcher, capper)
        # Duck-typed on purpose (see protocol/agent/client.py), hence not an ``acp.Client`` subtype.
        self._conn = connect_to_agent(
            self.client,  # type: ignore[arg-type]
            writer,
            tapped,
            use_unstable_protocol=True,
        )
        self._stack.push_async_callback(self._conn.close)
        capabilities = ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=launch.fs, write_text_file=launch.fs),
            terminal=launch.terminals_enabled,
        )
        try:
            init = await self._guard(
                self._conn.initialize(
                    protocol_version=PROTOCOL_VERSION,
                    client_capabilities=capabilities,
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
        self._stopping = True
        await self.client.terminals.release_all()
        await self._close_stack()

    async def _close_stack(self) -> None:
        # The SDK's close can report the pipe it is closing as reset when the agent is
        # already gone; the process is being ended either way.
        with contextlib.suppress(ConnectionError):
            await self._stack.aclose()

    async def kill(self) -> None:
        """Immediate end (a hung agent after the grace period)."""
        self._stopping = True
        if self.alive and self._process is not None:
            # SIGTERM, not SIGKILL: the reaper kills the agent's whole tree at once on it,
            # while a SIGKILLed reaper could not (the agent's descendants would live on).
            with contextlib.suppress(ProcessLookupError):
                self._process.terminate()
        await self.client.terminals.release_all()
        await self._close_stack()

    def _fail(self, message: str) -> None:
        self._tap.hand_over()  # what came before the failure is recorded before it
        if self._failure is None:
            self._failure = AgentProtocolError(message)
            self._recorder.event(EventKind.AGENT_PROTOCOL_ERROR, {"error": message})
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.terminate()  # the reaper kills the tree (see kill())

    async def _watch(self, process: AgentProcess) -> None:
        code = await process.wait()
        self._exited.set()
        if not self._stopping:
            self._recorder.event(
                EventKind.AGENT_EXITED,
                {
                    "exitCode": code,
                    "stderrTail": self._stderr_tail(),
                    "expected": False,
                },
            )
            if self._on_exit is not None:
                self._on_exit(code)

    async def _guard(self, request: Awaitable[T]) -> T:
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
                # The connection ends before the exit status is known; wait a moment for it.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._exited.wait(), 2)
            if self._failure is not None:
                raise self._failure from exc
            if self._process is not None:
                code = self._process.returncode
                if code is not None:
                    raise AgentExited(code, self._stderr_tail()) from exc
            raise AgentProtocolError(f"connection to the agent failed: {exc}") from exc

    def _stderr_tail(self) -> list[str]:
        """The end of the agent's stderr log with its secrets replaced by ***: it is stored
        (agent_exited) and quoted in errors, and an agent may print its own API key."""
        redactor = Redactor(self.launch.secret_values)
        return [redactor.redact(line) for line in tail_lines(self.launch.stderr_path)]

    def _require_conn(self) -> ClientSideConnection:
        if self._conn is None:
            raise AgentProtocolError("the agent connection is not started")
        if self._failure is not None:
            raise self._failure
        return self._conn

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
            response = await turn
        finally:
            if durable:
                await self._recorder.flush()
        return TurnResult(str(response.stop_reason), reported_usage(response), timed_out)

    async def cancel(self) -> None:
        """``session/cancel``; pending permission requests are answered ``cancelled``."""
        self.permissions.cancel_pending()
        if self._conn is not None and self.acp_session_id is not None and self.alive:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self._conn.cancel(session_id=self.acp_session_id)


async def _cancel_tasks(*tasks: asyncio.Task[Any]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
