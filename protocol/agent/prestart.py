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

Serve must answer its client's ``initialize`` with the agent's capabilities before the first
session exists. On a store that has not recorded them yet, ``PrestartPool.initialize`` does
the ``initialize`` exchange with the waiting process itself (one JSON-RPC line each way on
its pipes) and keeps the answer with it (``Handshake``); the session that adopts the process
then uses that answer instead of asking again, so the first serve of a new store starts its
agent once. A session whose ``initialize`` would say something else (other client
capabilities) cannot use an agent already initialized: the process is discarded.

This module imports no SDK and no store: it runs before they are loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.agent.spawn import under_reaper
from protocol.os_thread_name import name_this_thread
from state_machines import AgentStartFailed

HANDSHAKE_ID = 0  # the JSON-RPC id of the exchange (the adopting connection counts anew)


@dataclass(frozen=True)
class Handshake:
    """The ``initialize`` exchange done with a waiting process: what was asked, what it
    answered, and what it wrote after the answer (for the adopting connection to read)."""

    params: dict[str, Any]
    answer: dict[str, Any]
    leftover: bytes = b""


class HandshakeFailed(AgentStartFailed):
    """The waiting process did not answer ``initialize`` (exited, timed out, an error)."""


@dataclass
class Prestarted:
    """A spawned agent waiting for its session: taken at most once."""

    command: tuple[str, ...]
    cwd: str
    env: Mapping[str, str] = field(repr=False)
    popen: subprocess.Popen[bytes] = field(repr=False)
    stderr_path: str = ""
    handshake: Handshake | None = None

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

    def initialize(
        self,
        command: tuple[str, ...],
        env: Mapping[str, str],
        params: dict[str, Any],
        timeout: float,
    ) -> dict[str, Any] | None:
        """The waiting process's answer to ``initialize`` with ``params``, asked now (or
        earlier, with the same params); None when no process of that command and environment
        waits. The process stays in the pool, its handshake done. ``HandshakeFailed`` when it
        did not answer (the process is then discarded)."""
        with self._lock:
            spawned = self._spawned
            if spawned is None or spawned.popen.poll() is not None:
                return None
            if spawned.command != tuple(command) or dict(spawned.env) != dict(env):
                return None
            if spawned.handshake is not None:
                return spawned.handshake.answer if spawned.handshake.params == params else None
            self._spawned = None  # out of the pool while its pipes are in use here
        try:
            spawned.handshake = exchange_initialize(spawned.popen, params, timeout)
        except HandshakeFailed:
            spawned.discard()
            raise
        with self._lock:
            if self._spawned is None:
                self._spawned = spawned
                return spawned.handshake.answer
        spawned.discard()  # another took its place meanwhile (not done by serve or batch)
        return None

    def close(self) -> None:
        with self._lock:
            spawned, self._spawned = self._spawned, None
        if spawned is not None:
            spawned.discard()


def exchange_initialize(
    popen: subprocess.Popen[bytes], params: dict[str, Any], timeout: float
) -> Handshake:
    """Send ``initialize`` on the process's stdin and read its stdout up to the answer.

    Raw reads of the pipe's fd (``os.read``), never the ``Popen`` file object's buffered
    ones, so nothing past the answer hides in a buffer: it is kept as the leftover."""
    assert popen.stdin is not None and popen.stdout is not None
    request = {"jsonrpc": "2.0", "id": HANDSHAKE_ID, "method": "initialize", "params": params}
    try:
        os.write(popen.stdin.fileno(), json.dumps(request).encode() + b"\n")
    except OSError as exc:
        raise HandshakeFailed(f"the agent's stdin is closed: {exc}") from exc
    fd = popen.stdout.fileno()
    deadline = time.monotonic() + timeout
    pending = b""
    kept = b""  # lines before the answer (notifications), handed on in order
    while True:
        newline = pending.find(b"\n")
        if newline >= 0:
            line, pending = pending[: newline + 1], pending[newline + 1 :]
            answer = _answer_in(line)
            if answer is None:
                kept += line
                continue
            if "result" not in answer or not isinstance(answer["result"], dict):
                raise HandshakeFailed(f"the agent refused initialize: {answer.get('error')}")
            return Handshake(params, answer["result"], kept + pending)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise HandshakeFailed(f"no answer to initialize within {timeout:g} s")
        readable, _, _ = select.select([fd], [], [], remaining)
        if not readable:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            raise HandshakeFailed(f"the agent exited during initialize ({popen.poll()})")
        pending += chunk


def _answer_in(line: bytes) -> dict[str, Any] | None:
    """The JSON-RPC response to the handshake in one line, else None."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if isinstance(message, dict) and message.get("id") == HANDSHAKE_ID and "method" not in message:
        return message
    return None


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
    if spawned.handshake is not None and spawned.handshake.leftover:
        reader.feed_data(spawned.handshake.leftover)  # written after its initialize answer
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
