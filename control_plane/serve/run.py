"""``acpctl serve``'s main: open the control plane, serve ACP on stdio until the client
closes stdin, report the exit code (``lifetime.py``)."""

from __future__ import annotations

import asyncio
import sys

from acp import stdio_streams
from acp.agent.connection import AgentSideConnection

from control_plane.api import ControlPlane
from control_plane.config import Config
from control_plane.metrics import MetricsServer
from control_plane.serve.agent import ServeAgent
from control_plane.serve.lifetime import run_until_exit
from control_plane.serve.upstream import UpstreamClient
from protocol.agent.prestart import PrestartPool
from protocol.face.input_guard import guard_input
from store import (
    AgentSpec,
)


async def serve(
    config: Config,
    agent: AgentSpec,
    max_frame_bytes: int,
    backend: PrestartPool | None = None,
    metrics_at: tuple[str, int] | None = None,
) -> int:
    """Serve ACP on this process's stdin/stdout until the client closes stdin; the exit code
    (control_plane/serve/lifetime.py). ``backend``: the agent process started ahead for the
    first session (discarded if none takes it)."""
    front_loop = asyncio.get_running_loop()
    bridge = UpstreamClient(front_loop)
    settings = config.runtime_settings(ask=bridge.ask, fs_forward=bridge, prestarted=backend)
    db = config.prepared_db()
    cp = await asyncio.to_thread(ControlPlane.open, db, config.store_options(), settings)
    metrics: MetricsServer | None = None
    try:
        if metrics_at is not None:
            metrics = MetricsServer(cp, *metrics_at)
            host, port = metrics.address
            print(f"acpctl serve: metrics at http://{host}:{port}/metrics", file=sys.stderr)
        reader, writer = await stdio_streams(limit=1024 * 1024)
        server = ServeAgent(cp, agent, writer, config.queue_mode.value)
        bridge.agent = server
        guarded = asyncio.StreamReader(limit=1024 * 1024)
        pump = asyncio.create_task(guard_input(reader, guarded, writer, max_frame_bytes))
        conn = AgentSideConnection(
            server,  # type: ignore[arg-type]  # duck-typed on purpose: missing methods -> -32601
            writer,
            guarded,
            listening=False,
            use_unstable_protocol=True,
        )
        try:
            return await run_until_exit(
                conn.listen(), pump, cp.store_fault, config.timeouts.store_fault_s
            )
        finally:
            server.watches.close()
            pump.cancel()
            await conn.close()
    finally:
        if metrics is not None:
            metrics.close()
        await asyncio.to_thread(cp.close)
        if backend is not None:
            await asyncio.to_thread(backend.close)
