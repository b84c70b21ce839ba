"""``StoreRecorder``: an agent connection's output, appended to the session's event log in
wire order without ever blocking the protocol loop.

The loop hands over the frames of each read from the agent; the recorder keeps at most one
write in flight and coalesces everything that arrives meanwhile into the next write (one
transaction, many events). Order is kept because a single write is in flight at a time.
``flush()`` resolves when everything handed over so far has committed.

``write_after(fn)`` puts a write of the caller's behind everything handed over so far, in
the same transaction as the last of it where possible: the session actor records a turn's
outcome this way, so the turn's last updates and its outcome cost one commit, not two in a
row, and the outcome can never be committed ahead of an update of its turn.

Between writes the recorder waits at least ``min_interval_s`` (measured from the previous
write's submission; default 0, the session actors use ``RuntimeSettings.record_interval_s``):
an agent streams its updates one small write at a time, and without a pause every write that
commits opens the way for the next one or two frames to go alone, each costing a commit
(fsync), a feed wake-up and a forward. ``flush``, ``write_after`` and lifecycle ``event``s
never wait for it; a session actor flushes when it stops its agent, so nothing held back is
left behind at shutdown.

The write pipeline's state is the table in ``state_machines/recorder.py`` (``idle``, ``armed``,
``in_flight``, ``failed``); every change of it goes through that table. The state and the
buffer are shared by the protocol loop (frames handed over, the interval timer), the actor
thread (``flush_future``, ``write_after``) and the writer thread (a write's completion)
under one lock: posting completions back to the loop instead would add a thread hand-off to
every flush and outcome on the turn's critical path.

The recorder also keeps the running turn's message text (``take_text``), read from the
frames as they pass, so the outcome does not read the turn back from the log.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from actors import telemetry
from actors.session.text import TurnText
from state_machines import ControlPlaneError, StoreUnavailable
from state_machines.event_kinds import EventKind
from state_machines.recorder import RECORDER_MACHINE, RecorderEvent, RecorderState
from store import NewEvent, Store, ops
from store.writer import WriteContext

log = logging.getLogger(__name__)

# (command id, (kind, JSON text, the tap's parse of it or None))
Frame = tuple[str | None, tuple[str, str, Any]]
After = tuple[Callable[[WriteContext], Any], Future[Any]]


class StoreRecorder:
    def __init__(self, store: Store, session_id: str, min_interval_s: float = 0.0) -> None:
        self._store = store
        self._min_interval_s = min_interval_s
        self._last_submit = 0.0  # monotonic time of the last write's submission
        self._state = RecorderState.IDLE  # the write pipeline (state_machines/recorder.py)
        self._urgent = False  # something pending must not wait for the interval
        self._loop: asyncio.AbstractEventLoop | None = None  # the tap's loop, for the timer
        self.session_id = session_id
        self.command_id: str | None = None  # set by the session actor for each turn
        self.epoch: int | None = None  # the owner's fencing epoch; stale writes are refused
        self._lock = threading.Lock()
        self._buffer: list[Frame] = []
        self._after: list[After] = []
        self._handed = 0
        self._durable = 0
        self._error: BaseException | None = None  # why the pipeline failed
        self._dropped = 0  # frames handed over after it failed (not written)
        self._retry_delay = 0.0  # the backoff while the store refuses writes (0: it takes them)
        self._waiters: list[tuple[int, Future[None]]] = []
        self._text = TurnText()
        # Called with each session/update frame as it passes (on the loop), after it is
        # handed over: the session's budget watch (costs) and turn trace (tool calls).
        self.watchers: list[Callable[[dict[str, Any]], None]] = []

    # -- Recorder protocol (called on the protocol loop) ---------------------------------

    def updates(self, frames: list[tuple[str, dict[str, Any]]]) -> None:
        # The raw tap parsed the frames already: each is stored as is, without a second parse.
        if self.command_id is not None:
            for _, message in frames:
                self._text.add(message)
        for watch in self.watchers:
            for _, message in frames:
                watch(message)
        telemetry.SESSION_UPDATES.inc(len(frames))
        self._hand_over([(EventKind.SESSION_UPDATE, frame, message) for frame, message in frames])

    def event(self, kind: str, payload: dict[str, Any]) -> None:
        # Lifecycle events (agent exited, protocol error, context lost) are rare and the
        # actor's own writes follow them: they never wait for the interval.
        self._hand_over([(kind, NewEvent(kind, payload).payload_text(), None)], urgent=True)

    def flush(self) -> asyncio.Future[None]:
        return asyncio.wrap_future(self.flush_future())

    # -- any thread ----------------------------------------------------------------------

    @property
    def failed(self) -> bool:
        """A write of frames failed: what follows cannot be ordered behind them."""
        return self._state is RecorderState.FAILED

    @property
    def state(self) -> RecorderState:
        return self._state

    def take_text(self) -> str:
        """The running turn's message text so far (and start the next turn's)."""
        with self._lock:
            return self._text.take()

    def flush_future(self) -> Future[None]:
        future: Future[None] = Future()
        with self._lock:
            if self._error is not None:
                future.set_exception(self._error)
                return future
            if self._durable >= self._handed:
                future.set_result(None)
                return future
            self._waiters.append((self._handed, future))
            if self._state is RecorderState.IN_FLIGHT or not self._buffer:
                return future
            batch, after = self._take_pending()  # a flush does not wait for the interval
        self._submit(batch, after)
        return future

    def write_after(self, fn: Callable[[WriteContext], Any]) -> Future[Any]:
        """Run ``fn`` in a transaction after every frame handed over so far has been
        appended (in the same transaction as the last of them when they are not in flight
        yet). ``fn`` runs inside a savepoint: if it raises, its future fails and the frames
        still commit."""
        future: Future[Any] = Future()
        with self._lock:
            if self._error is not None:
                future.set_exception(self._error)
                return future
            self._after.append((fn, future))
            if self._state is RecorderState.IN_FLIGHT:
                return future
            batch, after = self._take_pending()
        self._submit(batch, after)
        return future

    def _hand_over(self, events: list[tuple[str, str, Any]], urgent: bool = False) -> None:
        with self._lock:
            if self._state is RecorderState.FAILED:
                # Frames after lost ones would leave an unmarked hole behind them in the log.
                if not self._dropped:
                    log.error(
                        "session %s: not recording events after a failed write (%s)",
                        self.session_id,
                        self._error,
                    )
                self._dropped += len(events)
                return
            command_id = self.command_id
            self._buffer.extend((command_id, event) for event in events)
            self._handed += len(events)
            if self._state is RecorderState.IN_FLIGHT:
                self._urgent = self._urgent or urgent
                return  # the write in flight takes these along when it is done
            if self._state is RecorderState.ARMED and not urgent:
                return  # the armed timer takes these along
            wait = 0.0 if urgent else self._interval_left()
            if wait > 0:
                try:
                    self._loop = asyncio.get_running_loop()
                except RuntimeError:
                    pass  # not on a loop (a test, a host thread): no timer, no wait
                else:
                    self._to(RecorderEvent.HOLD)
                    self._loop.call_later(wait, self._interval_over)
                    return
            batch, after = self._take_pending()
        self._submit(batch, after)

    def _to(self, event: RecorderEvent) -> None:
        """(Under the lock.) The pipeline's next state, by the table."""
        self._state = RECORDER_MACHINE.next_state(self._state, event, self.session_id)

    def _interval_left(self) -> float:
        return self._last_submit + self._min_interval_s - time.monotonic()

    def _interval_over(self) -> None:
        with self._lock:
            if self._state is not RecorderState.ARMED:
                return  # a flush or write_after went first; its completion takes the rest
            batch, after = self._take_pending()
            if not (batch or after):
                self._to(RecorderEvent.TIMER_EMPTY)
                return
        self._submit(batch, after)

    def _take_pending(self) -> tuple[list[Frame], list[After]]:
        """Everything waiting, for the next write (under the lock); when there is any, the
        write is in flight from now on."""
        batch, after = self._buffer, self._after
        self._buffer, self._after = [], []
        self._urgent = False
        if batch or after:
            self._to(RecorderEvent.SUBMIT)
            self._last_submit = time.monotonic()
        return batch, after

    def _submit(self, batch: list[Frame], after: list[After]) -> None:
        epoch = self.epoch

        def write(ctx: WriteContext) -> list[tuple[bool, Any]]:
            if batch:
                if epoch is not None:
                    ops.check_epoch(ctx.conn, self.session_id, epoch)
                self._append(ctx, batch)
            return [ctx.isolated(fn) for fn, _ in after]

        try:
            future = self._store.submit(write)
        except ControlPlaneError as exc:  # the store is closed: fail what waits, loudly
            future = Future()
            future.set_exception(exc)
        future.add_done_callback(lambda f: self._done(f, batch, after))

    def _retry_later(self, written: list[Frame], after: list[After], exc: BaseException) -> None:
        """The store refused the write for now (lock, disk full): nothing is dropped and
        nothing reordered. The frames and the writes behind them go back to the front of
        what is pending and are written again after a backoff (0.05 s doubling to 2 s);
        whoever waits for them (a flush, a turn's outcome) keeps waiting until they commit."""
        if not self._retry_delay:
            log.warning(
                "recording events of session %s: %s; retrying until the store takes them",
                self.session_id,
                exc,
            )
        self._retry_delay = min(2.0, max(0.05, self._retry_delay * 2))
        with self._lock:
            self._buffer[:0] = written
            self._after[:0] = after
            self._to(RecorderEvent.REFUSED)  # new frames wait for the retry: it takes them
            loop = self._loop
        delay = self._retry_delay
        if loop is not None and loop.is_running():
            try:
                loop.call_soon_threadsafe(loop.call_later, delay, self._interval_over)
                return
            except RuntimeError:
                pass  # the loop closed meanwhile
        timer = threading.Timer(delay, self._interval_over)
        timer.daemon = True
        timer.start()

    def _append(self, ctx: WriteContext, batch: list[Frame]) -> None:
        run: list[tuple[str, str, Any]] = []
        run_command: str | None = batch[0][0]
        for command_id, event in batch:
            if command_id != run_command:
                ops.append_frames(ctx, self.session_id, run_command, run)
                run, run_command = [], command_id
            run.append(event)
        ops.append_frames(ctx, self.session_id, run_command, run)

    def _done(
        self, future: Future[list[tuple[bool, Any]]], written: list[Frame], after: list[After]
    ) -> None:
        # Runs after the commit (or the failure): on the store's writer thread, or on the
        # submitting thread when the write had already failed.
        exc = future.exception()
        count = len(written)
        if isinstance(exc, StoreUnavailable):
            self._retry_later(written, after, exc)
            return
        if self._retry_delay:
            log.info("recording events of session %s works again", self.session_id)
            self._retry_delay = 0.0
        lost: list[After] = []
        with self._lock:
            if exc is not None and count:
                log.error("recording events of session %s failed: %s", self.session_id, exc)
                self._error = exc
                self._to(RecorderEvent.LOST)
                # Nothing is written behind lost frames: whoever waits fails with them.
                ready, self._waiters = self._waiters, []
                lost, self._after = self._after, []
                self._dropped += len(self._buffer)
                self._buffer = []
                batch: list[Frame] = []
                more: list[After] = []
                wait, loop = 0.0, None
            else:
                self._durable += count
                ready = [w for w in self._waiters if w[0] <= self._durable or exc is not None]
                self._waiters = [w for w in self._waiters if w not in ready]
                wait, loop = self._interval_left(), self._loop
                if (
                    wait > 0
                    and loop is not None
                    and loop.is_running()
                    and self._buffer
                    and not (self._after or self._waiters or self._urgent)
                ):
                    # Updates that came in during the write wait out the interval too
                    # (nobody is waiting for them): the next write takes whatever arrives
                    # meanwhile.
                    self._to(RecorderEvent.HOLD)
                    batch, more = [], []
                else:
                    loop = None
                    batch, more = self._take_pending()
                    if not (batch or more):
                        self._to(RecorderEvent.WRITTEN)
        # Callers first: what comes next (a timer, the next write) must not keep them waiting.
        for _, waiter in ready:
            if exc is not None:
                waiter.set_exception(exc)
            else:
                waiter.set_result(None)
        results = [(False, exc)] * len(after) if exc is not None else future.result()
        for (_, caller), (ok, value) in zip(after, results, strict=True):
            if ok:
                caller.set_result(value)
            else:
                caller.set_exception(value)
        for _, caller in lost:
            caller.set_exception(exc or StoreUnavailable("the recorder failed"))
        if loop is not None:
            try:
                loop.call_soon_threadsafe(loop.call_later, wait, self._interval_over)
            except RuntimeError:  # the loop closed meanwhile: write them now
                self._interval_over()
        elif batch or more:
            self._submit(batch, more)
