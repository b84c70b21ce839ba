"""An agent process started ahead of its session, and adopted by the session's connection.

``acpctl serve`` knows its backend agent before it has imported the SDK or opened the store
(about 0.6 s of start-up), and an editor's first ``session/new`` follows its ``initialize``
at once. Spawning the agent first thing lets the agent's own start-up (0.4 s to several
seconds) run while serve starts, so the first session pays no agent start of its own. The
process runs under the reaper like every agent (``protocol.agent.spawn.under_reaper``), spawned
from the main thread, which lives as long as serve.

``adopt`` then gives the process the shape the SDK's ``spawn_stdio_transport`` gives a new
one (reader, writer, process, and the same shutdown: stdin closed, a grace period, SIGTERM,
SIGKILL), so ``AgentConnection`` drives it like any other.

This module imports no SDK and no store: it runs before they are loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from protocol.agent.spawn import under_reaper
from protocol.os_thread_name import name_this_thread


@dataclass
class Prestarted:
    """A spawned agent waiting for its session: taken at most once."""

    command: tuple[str, ...]
    cwd: str
    env: Mapping[str, str] = field(repr=False)
    popen: subprocess.Popen[bytes] = field(repr=False)
    stderr_path: str = ""

    def matches(self, command: tuple[str, ...], cwd: str, env: Mapping[str, str]) -> bool:
        return (
            self.command == tuple(command)
            and os.path.realpath(self.cwd) == os.path.realpath(cwd)
            and dict(self.env) == dict(env)
            and self.popen.poll() is None
        )

    def discard(self) -> None:
        """Not used after all: SIGTERM to its reaper (which kills the tree), then reap it."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)


def prestart(
    command: tuple[str, ...], cwd: str, env: Mapping[str, str], stderr_path: str, nice: int = 0
) -> Prestarted:
    """Spawn ``command`` under the reaper (``nice`` steps nicer) with pipes for stdin and
    stdout, stderr appended to ``stderr_path``. ``OSError`` when it cannot be run."""
    os.makedirs(os.path.dirname(stderr_path) or ".", exist_ok=True)
    argv = under_reaper(command, env, cwd, nice)
    # "ab" (O_APPEND): the adopting connection caps this log by truncating it under the
    # agent (protocol/agent/stderr_log.py), which needs every write to go to the current end.
    with open(stderr_path, "ab") as stderr:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=cwd,
            env=dict(env),
        )
    return Prestarted(tuple(command), cwd, dict(env), popen, stderr_path)


class PrestartPool:
    """At most one prestarted agent, handed to the first launch it fits (same command, cwd
    and environment); thread-safe. ``close`` discards one nobody took."""

    def __init__(self, spawned: Prestarted | None = None) -> None:
        self._lock = threading.Lock()
        self._spawned = spawned

    def take(self, command: tuple[str, ...], cwd: str, env: Mapping[str, str]) -> Prestarted | None:
        with self._lock:
            spawned = self._spawned
            if spawned is None or not spawned.matches(command, cwd, env):
                return None
            self._spawned = None
            return spawned

    def close(self) -> None:
        with self._lock:
            spawned, self._spawned = self._spawned, None
        if spawned is not None:
            spawned.discard()


class AdoptedProcess:
    """The parts of ``asyncio.subprocess.Process`` a connection uses, for a ``Popen``."""

    def __init__(self, popen: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self._popen = popen
        self._exited = asyncio.Event()
        # Popen's exit is reaped by a thread of its own: asyncio watches only its own children.
        threading.Thread(target=self._reap, args=(loop,), name="agent-reap", daemon=True).start()

    def _reap(self, loop: asyncio.AbstractEventLoop) -> None:
        name_this_thread()
        self._popen.wait()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(self._exited.set)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode if self._exited.is_set() else None

    async def wait(self) -> int:
        await self._exited.wait()
        code = self._popen.returncode
        assert code is not None
        return code

    def terminate(self) -> None:
        if self._popen.returncode is None:
            self._popen.terminate()

    def kill(self) -> None:
        if self._popen.returncode is None:
            self._popen.kill()


@contextlib.asynccontextmanager
async def adopt(
    spawned: Prestarted, limit: int, shutdown_timeout: float
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter, AdoptedProcess]]:
    """Streams over the prestarted process's pipes, and its end as the SDK's transport ends
    a process it spawned."""
    loop = asyncio.get_running_loop()
    popen = spawned.popen
    assert popen.stdin is not None and popen.stdout is not None
    reader = asyncio.StreamReader(limit=limit)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), popen.stdout)
    # A StreamReaderProtocol (with an unused reader) gives the writer drain() and
    # wait_closed(), as asyncio's own subprocess streams have.
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), popen.stdin
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    process = AdoptedProcess(popen, loop)
    try:
        yield reader, writer, process
    finally:
        with contextlib.suppress(Exception):
            writer.close()
        try:
            await asyncio.wait_for(process.wait(), shutdown_timeout)
        except TimeoutError:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), shutdown_timeout)
            except TimeoutError:
                process.kill()
                await process.wait()
