"""``StoreRecorder``: an agent connection's output, appended to the session's event log in
wire order without ever blocking the protocol loop.

The loop hands over frames one by one; the recorder keeps at most one write in flight and
coalesces everything that arrives meanwhile into the next write (one transaction, many
events). Order is kept because a single write is in flight at a time. ``flush()`` resolves
when everything handed over so far has committed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Future
from typing import Any

from store import NewEvent, Store, WriteContext
from store import operations as ops

log = logging.getLogger(__name__)


class StoreRecorder:
    def __init__(self, store: Store, session_id: str) -> None:
        self._store = store
        self.session_id = session_id
        self.command_id: str | None = None  # set by the session actor for each turn
        self.epoch: int | None = None  # the owner's fencing epoch; stale writes are refused
        self._lock = threading.Lock()
        self._buffer: list[tuple[str | None, tuple[str, str]]] = []
        self._in_flight = False
        self._handed = 0
        self._durable = 0
        self._error: BaseException | None = None
        self._waiters: list[tuple[int, Future[None]]] = []

    # -- Recorder protocol (called on the protocol loop) ---------------------------------

    def update(self, frame: str) -> None:
        # The raw tap parsed the frame already: it is stored as is, without a second parse.
        self._hand_over(("session_update", frame))

    def event(self, kind: str, payload: dict[str, Any]) -> None:
        self._hand_over((kind, NewEvent(kind, payload).payload_text()))

    def flush(self) -> asyncio.Future[None]:
        return asyncio.wrap_future(self.flush_future())

    # -- any thread ----------------------------------------------------------------------

    def flush_future(self) -> Future[None]:
        future: Future[None] = Future()
        with self._lock:
            if self._error is not None:
                future.set_exception(self._error)
            elif self._durable >= self._handed:
                future.set_result(None)
            else:
                self._waiters.append((self._handed, future))
        return future

    def _hand_over(self, event: tuple[str, str]) -> None:
        with self._lock:
            self._buffer.append((self.command_id, event))
            self._handed += 1
            if self._in_flight:
                return
            self._in_flight = True
            batch, self._buffer = self._buffer, []
        self._submit(batch)

    def _submit(self, batch: list[tuple[str | None, tuple[str, str]]]) -> None:
        epoch = self.epoch

        def write(ctx: WriteContext) -> int:
            if epoch is not None:
                ops.check_epoch(ctx.conn, self.session_id, epoch)
            run: list[tuple[str, str]] = []
            run_command: str | None = batch[0][0]
            for command_id, event in batch:
                if command_id != run_command:
                    ops.append_frames(ctx, self.session_id, run_command, run)
                    run, run_command = [], command_id
                run.append(event)
            ops.append_frames(ctx, self.session_id, run_command, run)
            return len(batch)

        self._store.submit(write).add_done_callback(lambda f: self._done(f, len(batch)))

    def _done(self, future: Future[int], count: int) -> None:
        # Runs on the store's writer thread after the commit (or the failure).
        exc = future.exception()
        with self._lock:
            if exc is not None:
                log.error("recording events of session %s failed: %s", self.session_id, exc)
                self._error = exc
            self._durable += count
            ready = [w for w in self._waiters if w[0] <= self._durable or exc is not None]
            self._waiters = [w for w in self._waiters if w not in ready]
            batch, self._buffer = self._buffer, []
            self._in_flight = bool(batch)
        for _, waiter in ready:
            if exc is not None:
                waiter.set_exception(exc)
            else:
                waiter.set_result(None)
        if batch:
            self._submit(batch)
