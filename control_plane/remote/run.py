"""``acpctl serve --listen``'s main: the control plane behind an ASGI server (uvicorn) on
one port, until SIGTERM or SIGINT.

Shutdown: stop accepting (``/readyz`` says 503 from the first moment), let running turns
finish for ``grace_s``, then close every connection and the control plane, which interrupts
what still runs and records it (the next start reports those turns as interrupted)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from prometheus_client import REGISTRY

from control_plane.api import ControlPlane
from control_plane.config import Config
from control_plane.metrics import LevelsCollector, MetricsServer
from control_plane.remote.app import build_app
from control_plane.remote.hub import Hub, Limits
from control_plane.remote.permissions import PermissionRouter
from control_plane.remote.ws_protocol import FramesWebSocketProtocol
from protocol.agent.prestart import PrestartPool
from state_machines import ControlPlaneError
from store import AgentSpec

log = logging.getLogger("acpctl.remote")

LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@dataclass(frozen=True)
class ListenOptions:
    host: str
    port: int
    cert: Path | None = None
    key: Path | None = None
    insecure: bool = False  # beyond loopback without TLS, on purpose
    grace_s: float = 30.0
    limits: Limits = field(default_factory=Limits)


class ListenRefused(ControlPlaneError):
    """The --listen options do not go together, or would expose tokens in clear text."""


def check_listen(options: ListenOptions) -> None:
    if (options.cert is None) != (options.key is None):
        raise ListenRefused("--cert and --key go together")
    if options.cert is None and options.host not in LOOPBACK and not options.insecure:
        raise ListenRefused(
            f"refusing to listen on {options.host} without TLS: tokens and code would cross "
            "the network in clear text. Give --cert and --key, put a TLS-terminating proxy in "
            "front and listen on 127.0.0.1, or pass --insecure-no-tls if the network is yours"
        )


class _Server(uvicorn.Server):
    """uvicorn's server without its own signal handling: it re-raises the signal once it
    stopped, which would end the process before the control plane closes."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def serve_listen(
    config: Config,
    agent: AgentSpec,
    options: ListenOptions,
    backend: PrestartPool | None = None,
    metrics_at: tuple[str, int] | None = None,
    ready: asyncio.Event | None = None,
) -> int:
    check_listen(options)
    loop = asyncio.get_running_loop()
    permissions = PermissionRouter(config.permissions.ask_timeout_s)
    permissions.loop = loop
    settings = config.runtime_settings(ask=permissions.ask, prestarted=backend)
    db = config.prepared_db()
    cp = await asyncio.to_thread(ControlPlane.open, db, config.store_options(), settings)
    permissions.bind(cp)
    hub = Hub(cp, agent, config.queue_mode.value, permissions, options.limits)
    # /metrics on the listening port (token required), and on --metrics too if asked: both
    # read the default registry, where the runtime's levels are registered once.
    metrics = None if metrics_at is None else MetricsServer(cp, *metrics_at)
    levels = None
    if metrics is None:
        levels = LevelsCollector(cp)
        REGISTRY.register(levels)
    server = _Server(
        uvicorn.Config(
            build_app(hub),
            host=options.host,
            port=options.port,
            ssl_certfile=None if options.cert is None else str(options.cert),
            ssl_keyfile=None if options.key is None else str(options.key),
            ws_max_size=options.limits.max_frame_bytes + 1024,
            # Compression costs both ends CPU per frame (zlib) for small JSON frames: off.
            ws_per_message_deflate=False,
            ws=FramesWebSocketProtocol,  # uvicorn's, plus one write per burst of frames
            lifespan="off",
            log_config=None,
            timeout_graceful_shutdown=1,
        )
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    serving = asyncio.create_task(server.serve())
    sweeping = asyncio.create_task(hub.sweep_idle())
    rereading = asyncio.create_task(permissions.run())  # other nodes' requests, lost notes
    try:
        while not server.started:
            if serving.done():
                return 1  # could not bind (uvicorn logged why)
            await asyncio.sleep(0.02)
        scheme = "https" if options.cert else "http"
        address = server.servers[0].sockets[0].getsockname()
        print(
            f"acpctl serve: listening on {scheme}://{address[0]}:{address[1]}/acp", file=sys.stderr
        )
        if metrics is not None:
            host, port = metrics.address
            print(f"acpctl serve: metrics at http://{host}:{port}/metrics", file=sys.stderr)
        if ready is not None:
            ready.set()
        await asyncio.wait(
            {serving, asyncio.ensure_future(stop.wait())}, return_when="FIRST_COMPLETED"
        )
        hub.draining = True
        await _let_turns_finish(cp, options.grace_s)
        await hub.close_all("the server is shutting down")
        server.should_exit = True
        with contextlib.suppress(Exception):
            await serving
        return 0
    finally:
        sweeping.cancel()
        rereading.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if metrics is not None:
            metrics.close()
        if levels is not None:
            REGISTRY.unregister(levels)
        await asyncio.to_thread(cp.close)
        if backend is not None:
            await asyncio.to_thread(backend.close)


async def _let_turns_finish(cp: ControlPlane, grace_s: float) -> None:
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        running = (await asyncio.to_thread(cp.levels)).running_turns
        if running == 0:
            return
        log.info("acpctl serve: waiting for %d running turn(s) to finish", running)
        await asyncio.sleep(0.2)
    log.warning("acpctl serve: grace period over: interrupting the turns still running")
