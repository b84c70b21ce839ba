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

**A turn's answer joins its last frames.** An agent writes its last updates and its answer
to ``session/prompt`` together; the raw tap hands the frames over as it reads them and the
answer goes through the SDK, whose tasks reach the turn's outcome (``write_after``) a few
hundred microseconds later (0.15-1 ms measured in serve). Written at once, the last frames
would be in flight by then and the outcome would wait for their commit and take one of its
own: two commits in a row at every turn's end. So the tap tells the recorder first
(``answer_coming``, before the frames of that read) and the frames wait at most
``ANSWER_WAIT_S`` for a ``write_after``, which then takes them along: one commit. An answer
that brings no write (a response to another request) costs those frames that wait, at most.
Claude Code and Codex send the turn's ``usage_update`` last, in a read of its own just
before the answer: during a turn, a read that ends in one starts the same wait.

**One thread.** The write pipeline (its state, the buffer, the interval and retry timers)
lives on the protocol loop and is touched there only, without a lock. Its state is the table
in ``state_machines/recorder.py`` (``idle``, ``armed``, ``in_flight``, ``failed``); every
change of it goes through that table. Other threads reach it by posting to the loop:

- the actor thread's ``flush_future`` and ``write_after`` (one hop to the loop, which submits);
- the store's writer thread, when a write ends, posts ``written`` (or ``refused``, ``lost``)
  back. Before that it settles the callers that write carried (the futures of the
  ``write_after``s in it, the flushes its commit satisfies): those are the write's own, fixed
  when it was submitted, so the writer thread reads nothing the loop changes, and a turn's
  outcome reaches its actor straight from the commit, not through the loop.

The one piece read off the loop is the running turn's message text (``take_text``, the
actor's, when it records the outcome): collected from the frames as they pass, under a lock
of its own, so the outcome does not read the turn back from the log.
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
from actors.session.record_write import After, Frame, RecordWrite
from actors.session.text import TurnText
from protocol.agent.frame_router import update_kind
from protocol.loop import ProtocolLoop
from state_machines import ControlPlaneError, StoreUnavailable
from state_machines.event_kinds import EventKind
from state_machines.recorder import RECORDER_MACHINE, RecorderEvent, RecorderState
from store import NewEvent, Store
from store.writer import WriteContext

log = logging.getLogger(__name__)

# How long frames read with an answer of the agent's wait for the write the answer brings
# (see the module docstring). The wait ends at the ``write_after``, normally well before.
ANSWER_WAIT_S = 0.002


class RecorderStopped(ControlPlaneError):
    """The protocol loop that owns the recorder has stopped: nothing more can be written."""


class StoreRecorder:
    def __init__(
        self, store: Store, session_id: str, loop: ProtocolLoop, min_interval_s: float = 0.0
    ) -> None:
        self._store = store
        self._ploop = loop
        self._loop = loop.loop
        self._min_interval_s = min_interval_s
        self.session_id = session_id
        self.command_id: str | None = None  # set by the session actor for each turn
        self.epoch: int | None = None  # the owner's fencing epoch; stale writes are refused
        # The pipeline: the loop's only.
        self._state = RecorderState.IDLE
        self._last_submit = 0.0  # monotonic time of the last write's submission
        self._answer_until = 0.0  # monotonic time until which frames wait for an answer's write
        self._urgent = False  # something pending must not wait for the interval
        self._buffer: list[Frame] = []
        self._after: list[After] = []
        self._flushes: list[tuple[int, Future[None]]] = []  # (frames handed, waiter)
        self._handed = 0
        self._durable = 0
        self._error: BaseException | None = None  # why the pipeline failed
        self._dropped = 0  # frames handed over after it failed (not written)
        self._retry_delay = 0.0  # the backoff while the store refuses writes (0: it takes them)
        # The turn's text: written on the loop, taken by the actor.
        self._text_lock = threading.Lock()
        self._text = TurnText()
        # Called with each session/update frame as it passes (on the loop), after it is
        # handed over: the session's budget watch (costs) and turn trace (tool calls).
        self.watchers: list[Callable[[dict[str, Any]], None]] = []
        # Reads what the agent wrote that the loop has not read yet (the raw tap's ``pull``,
        # set by the connection while attached): the tap leaves the pipe unread while the
        # recorder is ``holding``, and its next event (a write's end, the interval's timer)
        # reads it before deciding what comes next.
        self.pull: Callable[[], None] | None = None

    # -- Recorder protocol (on the protocol loop) -----------------------------------------

    def updates(self, frames: list[tuple[str, dict[str, Any]]]) -> None:
        # The raw tap parsed the frames already: each is stored as is, without a second parse.
        if self.command_id is not None:
            with self._text_lock:
                for _, message in frames:
                    self._text.add(message)
        for watch in self.watchers:
            for _, message in frames:
                watch(message)
        telemetry.SESSION_UPDATES.inc(len(frames))
        if self.command_id is not None and update_kind(frames[-1][1]) == "usage_update":
            # Claude Code and Codex send a turn's usage last, in a read of its own just
            # before their answer (bench/turn_commits.py): wait for it as for the answer.
            self.answer_coming()
        self._hand_over([(EventKind.SESSION_UPDATE, frame, message) for frame, message in frames])

    def event(self, kind: str, payload: dict[str, Any]) -> None:
        # Lifecycle events (agent exited, protocol error, context lost) are rare and the
        # actor's own writes follow them: they never wait for the interval.
        self._hand_over([(kind, NewEvent(kind, payload).payload_text(), None)], urgent=True)

    def flush(self) -> asyncio.Future[None]:
        return asyncio.wrap_future(self.flush_future())

    def answer_coming(self) -> None:
        """The agent's read held an answer, handed to the SDK (the raw tap, before that
        read's frames): what is handed over next waits at most ``ANSWER_WAIT_S`` for the
        write the answer may bring (a turn's outcome), to go in one commit with it."""
        self._answer_until = time.monotonic() + ANSWER_WAIT_S

    # -- any thread ----------------------------------------------------------------------

    @property
    def failed(self) -> bool:
        """A write of frames failed: what follows cannot be ordered behind them."""
        return self._state is RecorderState.FAILED

    @property
    def state(self) -> RecorderState:
        return self._state

    @property
    def holding(self) -> bool:
        """Updates handed over now wait for an event of the recorder's own: a write in
        flight, or the interval's timer (on the loop). Both pull when they come."""
        return self._state is RecorderState.IN_FLIGHT or self._state is RecorderState.ARMED

    def take_text(self) -> str:
        """The running turn's message text so far (and start the next turn's)."""
        with self._text_lock:
            return self._text.take()

    def flush_future(self) -> Future[None]:
        """Resolves once every frame handed over before this call has committed."""
        future: Future[None] = Future()
        self._on_loop(self._flush, future)
        return future

    def write_after(self, fn: Callable[[WriteContext], Any]) -> Future[Any]:
        """Run ``fn`` in a transaction after every frame handed over so far has been
        appended (in the same transaction as the last of them when they are not in flight
        yet). ``fn`` runs inside a savepoint: if it raises, its future fails and the frames
        still commit."""
        future: Future[Any] = Future()
        self._on_loop(self._write_after, fn, future)
        return future

    def _on_loop(self, handler: Callable[..., None], *args: Any) -> None:
        """Run ``handler(*args, future)`` on the loop: now when called there, else posted.
        ``args[-1]`` is the caller's future, failed at once if the loop is gone."""
        if self._ploop.in_loop_thread():
            handler(*args)
            return
        future: Future[Any] = args[-1]
        if self._loop.is_running():
            try:
                self._loop.call_soon_threadsafe(handler, *args)
                return
            except RuntimeError:
                pass  # closed between the check and the post
        future.set_exception(
            RecorderStopped(f"session {self.session_id}: the protocol loop stopped; not recorded")
        )

    # -- the pipeline (on the loop) -------------------------------------------------------

    def _flush(self, future: Future[None]) -> None:
        if self._error is not None:
            future.set_exception(self._error)
        elif self._durable >= self._handed:
            future.set_result(None)
        else:
            self._flushes.append((self._handed, future))
            if self._state is not RecorderState.IN_FLIGHT and self._buffer:
                self._submit_pending()  # a flush does not wait for the interval

    def _write_after(self, fn: Callable[[WriteContext], Any], future: Future[Any]) -> None:
        if self._error is not None:
            future.set_exception(self._error)
            return
        self._after.append((fn, future))
        if self._state is not RecorderState.IN_FLIGHT:
            self._submit_pending()

    def _hand_over(self, events: list[tuple[str, str, Any]], urgent: bool = False) -> None:
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
        wait = 0.0 if urgent else self._wait_left()
        if wait > 0:
            self._to(RecorderEvent.HOLD)
            self._loop.call_later(wait, self._interval_over)
            return
        self._submit_pending()

    def _to(self, event: RecorderEvent) -> None:
        """The pipeline's next state, by the table."""
        self._state = RECORDER_MACHINE.next_state(self._state, event, self.session_id)

    def _wait_left(self) -> float:
        """How long what is pending may still wait: for the interval, or for an answer's
        write."""
        now = time.monotonic()
        return max(self._last_submit + self._min_interval_s, self._answer_until) - now

    def _interval_over(self) -> None:
        """The interval's timer (or a retry's, or the end of an answer's wait)."""
        if self._state is not RecorderState.ARMED:
            return  # a flush or write_after went first; its completion takes the rest
        if self.pull is not None:
            self.pull()
        if not (self._buffer or self._after):
            self._to(RecorderEvent.TIMER_EMPTY)
            return
        left = self._answer_until - time.monotonic()
        if left > 0 and not (self._after or self._flushes or self._urgent):
            # The pull read an answer with the frames: they wait a moment for its write.
            self._loop.call_later(left, self._interval_over)
            return
        self._submit_pending()

    def _submit_pending(self) -> None:
        """Write everything waiting, with the flushes it satisfies; the write is in flight
        from now on. Nothing waiting: nothing happens."""
        if not (self._buffer or self._after):
            return
        write = RecordWrite(self._buffer, self._after, [f for _, f in self._flushes])
        self._buffer, self._after, self._flushes = [], [], []
        self._urgent = False
        self._answer_until = 0.0  # what the answer brings, if anything, goes in the next write
        self._to(RecorderEvent.SUBMIT)
        self._last_submit = time.monotonic()
        try:
            future = self._store.submit(write.transaction(self.session_id, self.epoch))
        except ControlPlaneError as exc:  # the store is closed: fail what waits, loudly
            future = Future()
            future.set_exception(exc)
        future.add_done_callback(lambda f: self._ended(f, write))

    # -- a write's end (on the writer thread, or the submitting one when it failed at once)

    def _ended(self, future: Future[list[tuple[bool, Any]]], write: RecordWrite) -> None:
        exc = future.exception()
        if isinstance(exc, StoreUnavailable):
            self._post(self._refused, write, exc)  # retried: its callers keep waiting
            return
        if exc is not None and write.frames:
            self._post(self._lost, exc)
        else:
            self._post(self._written, len(write.frames))
        # The callers this write carried, after the post: what they do next (a turn's
        # next write) reaches the loop behind it.
        for waiter in write.flushes:
            if exc is not None:
                waiter.set_exception(exc)
            else:
                waiter.set_result(None)
        results = [(False, exc)] * len(write.afters) if exc is not None else future.result()
        for (_, caller), (ok, value) in zip(write.afters, results, strict=True):
            if ok:
                caller.set_result(value)
            else:
                caller.set_exception(value)

    def _post(self, handler: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(handler, *args)
        except RuntimeError:  # the loop closed: nobody hands over frames any more
            log.warning("session %s: a write ended after the protocol loop closed", self.session_id)

    # -- ... and back on the loop

    def _written(self, count: int) -> None:
        if self._retry_delay:
            log.info("recording events of session %s works again", self.session_id)
            self._retry_delay = 0.0
        self._durable += count
        done = [w for w in self._flushes if w[0] <= self._durable]
        self._flushes = [w for w in self._flushes if w[0] > self._durable]
        for _, waiter in done:  # flushes that came while the write was in flight
            waiter.set_result(None)
        if self.pull is not None:
            self.pull()
        wait = self._wait_left()
        if wait > 0 and self._buffer and not (self._after or self._flushes or self._urgent):
            # Updates that came in during the write wait out the interval too (nobody is
            # waiting for them), or for an answer's write: the next write takes whatever
            # arrives meanwhile.
            self._to(RecorderEvent.HOLD)
            self._loop.call_later(wait, self._interval_over)
        elif self._buffer or self._after:
            self._submit_pending()  # in_flight -> in_flight
        else:
            self._to(RecorderEvent.WRITTEN)

    def _refused(self, write: RecordWrite, exc: BaseException) -> None:
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
        self._buffer[:0] = write.frames
        self._after[:0] = write.afters
        # Every flush that waited on it was for frames handed before it: all of them now.
        self._flushes[:0] = [(self._durable + len(write.frames), f) for f in write.flushes]
        self._to(RecorderEvent.REFUSED)  # new frames wait for the retry: it takes them
        self._loop.call_later(self._retry_delay, self._interval_over)

    def _lost(self, exc: BaseException) -> None:
        """A write of frames failed for good: nothing is written behind lost frames, and
        whoever waits fails with them."""
        log.error("recording events of session %s failed: %s", self.session_id, exc)
        self._error = exc
        self._to(RecorderEvent.LOST)
        self._dropped += len(self._buffer)
        self._buffer = []
        flushes, self._flushes = self._flushes, []
        afters, self._after = self._after, []
        for _, waiter in flushes:
            waiter.set_exception(exc)
        for _, caller in afters:
            caller.set_exception(exc)
