"""How an agent process comes to be: spawned under the reaper (stdio pipes, stderr to its
log file), or started ahead of its session and adopted (``acpctl serve``)."""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AsyncExitStack

from acp.transports import spawn_stdio_transport

from protocol.agent.prestart import AdoptedProcess, Prestarted, adopt
from protocol.agent.spawn import under_reaper
from protocol.agent.types import AgentLaunch
from state_machines.errors import AgentStartFailed

# A process the connection spawned, or one started ahead and adopted (prestart.py).
AgentProcess = asyncio.subprocess.Process | AdoptedProcess
Transport = contextlib.AbstractAsyncContextManager[
    tuple[asyncio.StreamReader, asyncio.StreamWriter, AgentProcess]
]
STREAM_LIMIT = 1024 * 1024


def agent_transport(
    launch: AgentLaunch, prestarted: Prestarted | None, stack: AsyncExitStack
) -> Transport:
    """The (reader, writer, process) of the agent, as a context the connection enters: its
    exit ends the process (the SDK's shutdown: stdin closed, terminate, kill). The stderr
    log file is opened on ``stack`` and closed with it."""
    if prestarted is not None:
        # Spawned ahead of this session (acpctl serve): its start-up is already paid.
        return adopt(prestarted, STREAM_LIMIT, launch.shutdown_timeout_s)
    # "ab" is O_WRONLY | O_APPEND: every write of the agent (and of its children, which
    # inherit the fd) goes to the current end of the file, which is what lets StderrLog
    # truncate the file under the agent (stderr_log.py).
    stderr = stack.enter_context(open(launch.stderr_path, "ab"))  # noqa: SIM115
    try:
        argv = under_reaper(launch.command, launch.env, launch.cwd, launch.nice)
    except OSError as exc:
        raise AgentStartFailed(f"cannot run {launch.command[0]!r}: {exc}") from exc
    transport: Transport = spawn_stdio_transport(
        argv[0],
        *argv[1:],
        env=dict(launch.env),
        cwd=launch.cwd,
        stderr=stderr.fileno(),
        limit=STREAM_LIMIT,
        shutdown_timeout=launch.shutdown_timeout_s,
    )
    return transport
