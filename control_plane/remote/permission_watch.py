"""The session watches of the node that asks: while a request asked here waits, its
session's ``permission_settled`` events are heard here, so another node's winning answer
reaches the agent (a commit of that node, read back on its notification on PostgreSQL; on
SQLite the router's re-read is the path)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from control_plane.api import ControlPlane
from state_machines.event_kinds import EventKind
from store import SessionWatch

log = logging.getLogger("acpctl.remote")

Heard = Callable[[str, Sequence[Any]], None]


def spawn(tasks: set[asyncio.Task[None]], work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` in the background on this loop, kept in ``tasks`` while it runs; a
    failure is logged (a store that refuses now: the router's periodic re-read tries again)."""
    task = asyncio.get_running_loop().create_task(_logged(work))
    tasks.add(task)
    task.add_done_callback(tasks.discard)


async def _logged(work: Coroutine[Any, Any, None]) -> None:
    try:
        await work
    except Exception as exc:
        log.warning("permission requests not looked up: %s", exc)


class SettlementWatches:
    def __init__(self, heard: Heard) -> None:
        self._heard = heard
        self._watches: dict[str, SessionWatch] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def open(self, cp: ControlPlane, session_id: str) -> None:
        """Watch the session (once however many requests of it wait)."""
        if session_id in self._watches:
            return
        loop = asyncio.get_running_loop()

        def wake() -> None:  # the writer's (or the listener's) thread
            loop.call_soon_threadsafe(self._take, session_id)

        watch = await asyncio.to_thread(
            cp.watch_session,
            session_id,
            wake,
            lambda e: e.kind == EventKind.PERMISSION_SETTLED,
            False,
        )
        if session_id in self._watches:  # another ask of the session got there first
            watch.close()
        else:
            self._watches[session_id] = watch

    def close(self, session_id: str) -> None:
        watch = self._watches.pop(session_id, None)
        if watch is not None:
            watch.close()

    def _take(self, session_id: str) -> None:
        watch = self._watches.get(session_id)
        if watch is not None:
            spawn(self._tasks, self._take_async(session_id, watch))

    async def _take_async(self, session_id: str, watch: SessionWatch) -> None:
        share = await watch.take_async()  # reads the log after another node's commit
        self._heard(session_id, share.events)
