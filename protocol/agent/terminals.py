"""``terminal/*`` served to agents: off by default (every method answers -32601).

When enabled, each terminal is a real subprocess started in the session cwd (or a confined
cwd the agent names), its stdout and stderr merged into one buffer capped at
``output_byte_limit`` bytes: when over, the oldest output is dropped (at a character
boundary) and ``truncated`` is reported, as the ACP spec describes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
from dataclasses import dataclass, field

from acp import RequestError
from acp.schema import (
    CreateTerminalResponse,
    EnvVariable,
    TerminalExitStatus,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
)

from protocol.agent.fs import Confinement

DEFAULT_OUTPUT_LIMIT = 1024 * 1024


@dataclass
class _Terminal:
    process: asyncio.subprocess.Process
    limit: int
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    reader: asyncio.Task[None] | None = None

    def append(self, chunk: bytes) -> None:
        self.output.extend(chunk)
        excess = len(self.output) - self.limit
        if excess > 0:
            del self.output[:excess]
            # Do not start in the middle of a UTF-8 sequence.
            while self.output and (self.output[0] & 0xC0) == 0x80:
                del self.output[0]
            self.truncated = True

    def exit_status(self) -> TerminalExitStatus | None:
        code = self.process.returncode
        if code is None:
            return None
        if code < 0:
            return TerminalExitStatus(exit_code=None, signal=signal.Signals(-code).name)
        return TerminalExitStatus(exit_code=code, signal=None)


class TerminalManager:
    def __init__(
        self, confinement: Confinement, base_env: dict[str, str], enabled: bool = False
    ) -> None:
        self.enabled = enabled
        self._base_env = base_env  # the agent's own environment, never the host's
        self._confinement = confinement
        self._terminals: dict[str, _Terminal] = {}
        self._ids = itertools.count(1)

    def _require(self, method: str) -> None:
        if not self.enabled:
            raise RequestError.method_not_found(method)

    def _get(self, terminal_id: str) -> _Terminal:
        terminal = self._terminals.get(terminal_id)
        if terminal is None:
            raise RequestError.invalid_params({"terminalId": terminal_id, "reason": "unknown"})
        return terminal

    async def create(
        self,
        command: str,
        args: list[str] | None,
        env: list[EnvVariable] | None,
        cwd: str | None,
        output_byte_limit: int | None,
    ) -> CreateTerminalResponse:
        self._require("terminal/create")
        workdir = self._confinement.resolve(cwd) if cwd else self._confinement.cwd
        extra = {v.name: v.value for v in env or []}
        process = await asyncio.create_subprocess_exec(
            command,
            *(args or []),
            cwd=str(workdir),
            env={**self._base_env, **extra},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        terminal = _Terminal(process, output_byte_limit or DEFAULT_OUTPUT_LIMIT)
        terminal.reader = asyncio.create_task(self._pump(terminal))
        terminal_id = f"term-{next(self._ids)}"
        self._terminals[terminal_id] = terminal
        return CreateTerminalResponse(terminal_id=terminal_id)

    @staticmethod
    async def _pump(terminal: _Terminal) -> None:
        assert terminal.process.stdout is not None
        while chunk := await terminal.process.stdout.read(65536):
            terminal.append(chunk)
        await terminal.process.wait()

    async def output(self, terminal_id: str) -> TerminalOutputResponse:
        self._require("terminal/output")
        t = self._get(terminal_id)
        return TerminalOutputResponse(
            output=t.output.decode("utf-8", errors="replace"),
            truncated=t.truncated,
            exit_status=t.exit_status(),
        )

    async def wait_for_exit(self, terminal_id: str) -> WaitForTerminalExitResponse:
        self._require("terminal/wait_for_exit")
        t = self._get(terminal_id)
        if t.reader is not None:
            await asyncio.shield(t.reader)
        status = t.exit_status()
        assert status is not None
        return WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def kill(self, terminal_id: str) -> None:
        self._require("terminal/kill")
        t = self._get(terminal_id)
        if t.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                t.process.kill()

    async def release(self, terminal_id: str) -> None:
        self._require("terminal/release")
        t = self._terminals.pop(terminal_id, None)
        if t is None:
            raise RequestError.invalid_params({"terminalId": terminal_id, "reason": "unknown"})
        if t.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                t.process.kill()
        if t.reader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(t.reader, 5)

    async def release_all(self) -> None:
        for terminal_id in list(self._terminals):
            await self.release(terminal_id)
