"""Agent processes shared by several sessions (``[agents.NAME] sessions_per_process``).

ACP lets one agent connection hold several sessions: ``session/new`` per session, each with
its own cwd. Starting an agent costs 1-2 s of CPU and 110-335 MB for the real ones, so a batch
of 1,000 tasks, or a parent's fan-out of children, runs on a handful of processes instead of
one per session. The pool hands a starting session a live process of the same launch (same
command, cwd, environment and options) that has room, starts one when none has, and lets
sessions that start at the same moment share the one being started. A process without
sessions lives ``idle_s`` more for the next one, then ends.

Crash isolation stays explicit: when a shared process dies, every session on it is told
(``agent_exited`` in its own log) and follows its own policy (a running turn fails, an idle
session starts an agent at its next prompt). A session's own kill (a turn that ignored its
cancel) takes only that session off the process while others use it; the process then
takes no new session and is killed once the others have left.

Runs on the protocol loop (``acquire``, ``release``); ``owns`` from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from protocol.agent.host import AgentHost
from protocol.agent.prestart import Prestarted
from protocol.agent.types import AgentLaunch

log = logging.getLogger(__name__)

LaunchKey = tuple[Any, ...]


def launch_key(launch: AgentLaunch) -> LaunchKey:
    """What two sessions must have in common to share a process: everything the process is
    started with (the stderr log path aside, which is the first session's)."""
    return (
        launch.command,
        launch.cwd,
        tuple(sorted(launch.env.items())),
        launch.fs,
        launch.terminals_enabled,
        launch.max_frame_bytes,
        launch.read_coalesce_s,
        launch.shutdown_timeout_s,
        launch.stderr_max_bytes,
    )


class AgentPool:
    def __init__(self, idle_s: float = 60.0) -> None:
        self.idle_s = idle_s
        self._hosts: dict[LaunchKey, list[AgentHost]] = {}
        self._capacity: dict[int, int] = {}  # id(host) -> sessions it may hold
        self._starting: dict[LaunchKey, asyncio.Future[None]] = {}
        self._retire: dict[int, asyncio.TimerHandle] = {}
        self._draining: set[int] = set()  # id() of hosts that take no new session

    async def acquire(
        self,
        launch: AgentLaunch,
        capacity: int,
        attach: Callable[[AgentHost, bool], None],
        take_prestarted: Callable[[], Prestarted | None] | None = None,
    ) -> AgentHost:
        """A started process for one more session (``AgentStartFailed`` when it cannot
        start). ``attach(host, running)`` joins the session to the process before it is used
        (``running``: it was running already), and before a new one starts: what the agent
        says while starting (its exit, its stderr tail) is in the log of the session that
        started it. ``take_prestarted``: a process started
        ahead for this launch (``acpctl batch``), adopted when a new one is needed."""
        key = launch_key(launch)
        while True:
            host = self._with_room(key)
            if host is not None:
                self._take(host)
                attach(host, True)
                return host
            pending = self._starting.get(key)
            if pending is None:
                break
            await asyncio.shield(pending)  # another session is starting one: share it
        prestarted = None if take_prestarted is None else take_prestarted()
        if prestarted is not None:  # its stderr went to the log it was started with
            launch = replace(launch, stderr_path=prestarted.stderr_path or launch.stderr_path)
        host = AgentHost(launch, prestarted, shared=True)
        attach(host, False)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._starting[key] = done
        try:
            await host.start()
        finally:
            del self._starting[key]
            done.set_result(None)
        self._capacity[id(host)] = max(1, capacity)
        self._hosts.setdefault(key, []).append(host)
        self._take(host)
        return host

    async def release(self, host: AgentHost, kill: bool = False) -> None:
        """A session left the process. ``kill``: the session wanted its agent dead (a turn
        that ignored its cancel). Done at once when no other session is on it; otherwise the
        process takes no new session (it is suspect, and the agent may still think the
        leaver's turn runs) and is killed when the last one leaves."""
        host.sessions = max(0, host.sessions - 1)
        if not host.alive or host.failure is not None:
            self._forget(host)
            return
        if kill:
            self._draining.add(id(host))
        if host.sessions > 0:
            return
        if id(host) in self._draining:
            self._forget(host)
            await host.kill()
            return
        loop = asyncio.get_running_loop()
        self._retire[id(host)] = loop.call_later(
            self.idle_s, lambda: loop.create_task(self._retire_idle(host))
        )

    def owns(self, tree: dict[str, Any] | None) -> bool:
        """Whether a stored process tree is one of the pool's live processes (a session
        coming back to a process it shares must not kill it as a leftover)."""
        return any(h.is_tree(tree) for hosts in list(self._hosts.values()) for h in list(hosts))

    async def stop_idle(self) -> None:
        """End every process no session uses, now (the node is fencing itself)."""
        for hosts in list(self._hosts.values()):
            for host in list(hosts):
                if host.sessions == 0:
                    self._forget(host)
                    await host.stop()

    async def close(self) -> None:
        """End every process (the control plane stops; its agents die with it)."""
        for hosts in list(self._hosts.values()):
            for host in list(hosts):
                self._forget(host)
                with contextlib.suppress(Exception):
                    await host.stop()

    # -- internals -----------------------------------------------------------------------

    def _with_room(self, key: LaunchKey) -> AgentHost | None:
        for host in list(self._hosts.get(key, [])):
            if not host.alive or host.failure is not None:
                if host.sessions == 0:
                    self._forget(host)
                continue
            if id(host) in self._draining:
                continue
            if host.sessions < self._capacity.get(id(host), 1):
                return host
        return None

    def _take(self, host: AgentHost) -> None:
        host.sessions += 1
        timer = self._retire.pop(id(host), None)
        if timer is not None:
            timer.cancel()

    def _forget(self, host: AgentHost) -> None:
        timer = self._retire.pop(id(host), None)
        if timer is not None:
            timer.cancel()
        for hosts in self._hosts.values():
            if host in hosts:
                hosts.remove(host)
        self._capacity.pop(id(host), None)
        self._draining.discard(id(host))

    async def _retire_idle(self, host: AgentHost) -> None:
        self._retire.pop(id(host), None)
        if host.sessions == 0:
            self._forget(host)
            await host.stop()
