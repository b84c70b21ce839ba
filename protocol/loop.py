"""The protocol loop: one thread running one asyncio event loop that owns every agent
connection.

Other threads hand it coroutines (``submit``/``call``/``when_done``); nothing on the loop ever
blocks on another thread. In particular a pykka future is never awaited on the loop (pykka's
``__await__`` calls the blocking ``get()`` and would stall every agent): use
``wait_off_loop(future.get)`` instead, which parks the wait on an executor thread.

Agent subprocesses are spawned from this thread, which lives as long as the process: that is
what makes their parent-death signal (see ``protocol/agent/spawn.py``) fire only when the whole
control plane dies.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from protocol.os_thread_name import name_this_thread

T = TypeVar("T")


class ProtocolLoop:
    def __init__(self, name: str = "acp-protocol-loop") -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        name_this_thread()
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._ready.set)
        self._loop.run_forever()
        # Drain what is left so transports close cleanly.
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        if pending:
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coro`` on the loop from any thread; returns a thread-safe future."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and block this (non-loop) thread for its result."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("ProtocolLoop.call() from the loop thread would deadlock")
        return self.submit(coro).result(timeout)

    def when_done(
        self, coro: Coroutine[Any, Any, T], callback: Callable[[Future[T]], None]
    ) -> Future[T]:
        """Schedule ``coro`` and call ``callback(future)`` when it finishes (on the loop
        thread: keep the callback short, e.g. an actor ``tell``)."""
        future = self.submit(coro)
        future.add_done_callback(callback)
        return future

    def stop(self, timeout: float = 10.0) -> None:
        if not self._thread.is_alive():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)


async def wait_off_loop(blocking: Callable[[], T]) -> T:
    """Wait for a blocking call (``pykka_future.get``, ``Future.result``) on an executor
    thread, so the loop keeps serving every other connection meanwhile."""
    return await asyncio.get_running_loop().run_in_executor(None, blocking)
