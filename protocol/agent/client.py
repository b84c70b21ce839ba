"""The client side the control plane serves to one agent connection: permission requests,
confined file access and (optionally) terminals. Runs on the protocol loop.

``session/update`` notifications are NOT persisted here: the SDK validates them into typed
models (dropping unknown kinds) and runs each in its own task. The raw tap in
``protocol/agent/connection.py`` records them verbatim and in wire order instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from acp import RequestError
from acp.schema import (
    CreateTerminalResponse,
    EnvVariable,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalOutputResponse,
    ToolCallUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from protocol.agent.fs import DEFAULT_MAX_BYTES, Confinement
from protocol.agent.permissions import PermissionBroker
from protocol.agent.terminals import TerminalManager


class FsForward(Protocol):
    """Where ``fs/*`` goes when an upstream client serves files (``acpctl serve`` with a
    client that advertised the capability). Paths are confinement-checked first. Called with
    the control-plane session id (the session's broker knows it), else the agent's ACP id."""

    def serves_files(self) -> bool: ...

    async def read_text_file(
        self, session_id: str, path: str, line: int | None, limit: int | None
    ) -> str: ...

    async def write_text_file(self, session_id: str, path: str, content: str) -> None: ...


# Workers for agents' file operations, shared by every session of the process.
_FS_WORKERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="acp-fs")
T = TypeVar("T")


@dataclass(frozen=True)
class FsLimits:
    """``limits.fs_max_bytes`` and ``timeouts.fs_s`` of the configuration."""

    max_bytes: int = DEFAULT_MAX_BYTES
    timeout_s: float = 30.0


class ControlPlaneClient:
    """Duck-typed ``acp.Client`` (not a subclass: an unimplemented method must answer -32601,
    which the SDK only does for methods that do not exist)."""

    def __init__(
        self,
        confinement: Confinement,
        permissions: PermissionBroker,
        terminals: TerminalManager,
        fs_forward: FsForward | None = None,
        fs_limits: FsLimits | None = None,
    ) -> None:
        self.confinement = confinement
        self.permissions = permissions
        self.terminals = terminals
        self.fs_forward = fs_forward
        self.fs_limits = fs_limits or FsLimits()
        # One file operation of this agent at a time: a session that reads a slow or huge
        # file waits on itself, never takes every worker from the other sessions.
        self._fs_turn = asyncio.Semaphore(1)

    async def _off_loop(self, path: str, fn: Callable[[], T]) -> T:
        """``fn`` (blocking file I/O) on the shared fs workers, bounded in time: the protocol
        loop serves every session's agent and must never wait on a disk or a FIFO."""
        async with self._fs_turn:
            future = asyncio.get_running_loop().run_in_executor(_FS_WORKERS, fn)
            try:
                return await asyncio.wait_for(future, self.fs_limits.timeout_s)
            except TimeoutError:
                raise RequestError.internal_error(
                    {"path": path, "reason": f"took over {self.fs_limits.timeout_s:g}s"}
                ) from None

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        return None  # persisted by the raw tap, in wire order, verbatim

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **_: Any,
    ) -> RequestPermissionResponse:
        return await self.permissions.request(session_id, tool_call, options)

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **_: Any,
    ) -> ReadTextFileResponse:
        if self.fs_forward is not None and self.fs_forward.serves_files():
            self.confinement.resolve(path)  # refused here even if the client would allow it
            content = await self.fs_forward.read_text_file(
                self.permissions.session_id or session_id, path, line, limit
            )
            return ReadTextFileResponse(content=content)
        max_bytes = self.fs_limits.max_bytes
        content = await self._off_loop(
            path, lambda: self.confinement.read_text(path, line, limit, max_bytes)
        )
        return ReadTextFileResponse(content=content)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **_: Any
    ) -> WriteTextFileResponse:
        if self.fs_forward is not None and self.fs_forward.serves_files():
            self.confinement.resolve(path)
            await self.fs_forward.write_text_file(
                self.permissions.session_id or session_id, path, content
            )
            return WriteTextFileResponse()
        max_bytes = self.fs_limits.max_bytes
        await self._off_loop(path, lambda: self.confinement.write_text(path, content, max_bytes))
        return WriteTextFileResponse()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **_: Any,
    ) -> CreateTerminalResponse:
        return await self.terminals.create(command, args, env, cwd, output_byte_limit)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> TerminalOutputResponse:
        return await self.terminals.output(terminal_id)

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> WaitForTerminalExitResponse:
        return await self.terminals.wait_for_exit(terminal_id)

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> KillTerminalResponse:
        await self.terminals.kill(terminal_id)
        return KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> ReleaseTerminalResponse:
        await self.terminals.release(terminal_id)
        return ReleaseTerminalResponse()
