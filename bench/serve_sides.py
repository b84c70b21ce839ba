"""The sides the serve benchmarks time (bench/serve_overhead.py, bench/real_agent_turns.py):
a process spawned as an ACP agent over stdio (``acpctl serve``, the agent directly, a relay),
driven by the SDK's client, which counts the chunks of each turn and, for ``#stamp`` turns,
each update's latency from the agent's write."""

from __future__ import annotations

import os
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from acp import PROTOCOL_VERSION, spawn_agent_process
from acp.client.connection import ClientSideConnection
from acp.schema import ClientCapabilities, HttpMcpServer

START_TIMEOUT_S = 120.0  # from spawning a side to its session/new answered


def update_stamp_ns(update: Any) -> int | None:
    """The agent's send time out of a ``#stamp`` chunk ("c7@123456789 "), None without one."""
    text = getattr(getattr(update, "content", None), "text", "")
    _, at, stamp = text.rstrip().rpartition("@")
    return int(stamp) if at and stamp.isdigit() else None


class CountingClient:
    """Counts the ``agent_message_chunk`` updates it receives (per turn: reset before it)."""

    def __init__(self) -> None:
        self.chunks = 0
        self.other = 0
        # Agent write to client read, ms, per update of the timed turns (``#stamp``: each
        # chunk ends with "@<the agent's CLOCK_MONOTONIC in ns>"; the clock is system-wide).
        self.latencies_ms: list[float] = []
        self.timing = False

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        if getattr(update, "session_update", None) == "agent_message_chunk":
            self.chunks += 1
            if self.timing:
                sent = update_stamp_ns(update)
                if sent is not None:
                    self.latencies_ms.append((time.monotonic_ns() - sent) / 1e6)
        else:
            self.other += 1

    async def request_permission(self, *_: Any, **__: Any) -> Any:
        raise RuntimeError("a '#chunks=N' turn asks no permission")


@dataclass
class Side:
    name: str
    client: CountingClient
    conn: ClientSideConnection
    session_id: str
    pid: int = 0
    times_ms: list[float] = field(default_factory=list)


async def start_side(
    stack: AsyncExitStack,
    name: str,
    argv: list[str],
    workdir: str,
    env: dict[str, str],
    mcp_servers: list[dict[str, Any]] | None = None,
) -> Side:
    client = CountingClient()
    stderr = stack.enter_context(open(os.path.join(workdir, f"{name}.stderr.log"), "ab"))  # noqa: SIM115
    conn, process = await stack.enter_async_context(
        spawn_agent_process(
            client,  # type: ignore[arg-type]  # duck-typed client
            argv[0],
            *argv[1:],
            env=env,
            cwd=workdir,
            transport_kwargs={"stderr": stderr.fileno(), "shutdown_timeout": 5.0},
            use_unstable_protocol=True,
        )
    )
    await conn.initialize(
        protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities()
    )
    offered = [HttpMcpServer.model_validate(entry) for entry in mcp_servers or []]
    session = await conn.new_session(cwd=workdir, mcp_servers=list(offered))
    return Side(name, client, conn, session.session_id, pid=process.pid)
