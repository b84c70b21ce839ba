"""Delivery: one projector per binding moves events from the log to the binding's sink.

A projector reads the events after its checkpoint, hands them to the sink in seq order, and
advances the checkpoint only after the sink accepted them. A crash in between re-delivers
those events on restart; sinks dedupe by event id, so each one lands once.

From the commit: a projector whose last delivery (in this process) ended exactly before a
commit's events takes them from the commit (``Store.watch.appends``), with no read of
the binding or the log; one further behind, or not seen yet, reads the log from its
checkpoint. A read that reached the log's end is not repeated to find nothing: a commit
after it marked the binding for another pump.

Threads: projectors run on a small worker pool. A binding is pumped by at most one worker at a
time (order), and a sink that raises is retried after a jittered exponential backoff on a
timer, without holding a worker: one failing or slow sink never blocks another binding or the
session that produced the events.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from tenacity import RetryCallState, wait_random_exponential

from actors.delivery.announce import AnnounceSink
from actors.delivery.sinks import CallbackSink, JsonlFileSink, Sink
from state_machines import ControlPlaneError
from store import BindingRecord, EventRecord, SinkKind, Store
from store.faults import fault_point
from store.write_context import Appended, appended_events

log = logging.getLogger(__name__)

BATCH = 256


class SinkUnavailable(ControlPlaneError):
    """A binding names a callback that nobody registered in this process (yet)."""


class DeliveryService:
    def __init__(
        self,
        store: Store,
        workers: int = 4,
        max_backoff_s: float = 30.0,
        batch_size: int = BATCH,
        on_parent_work: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self.on_parent_work = on_parent_work  # an announce queued a prompt for this parent
        self._batch_size = batch_size
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="delivery")
        self._lock = threading.Condition()
        self._sinks: dict[str, Sink] = {}  # per binding
        self._files: dict[str, JsonlFileSink] = {}  # per path: one file, one writer, one id set
        self._callbacks: dict[str, Callable[[EventRecord], None]] = {}
        self._busy: set[str] = set()  # bindings a worker is pumping
        self._dirty: set[str] = set()  # bindings that got events while being pumped
        self._failures: dict[str, int] = {}  # consecutive sink errors per binding
        # Each session's bindings, by id, once looked up: asking the store after every commit
        # would cost a query per turn. Bindings are created by spawn (in the same commit as
        # the session's first event, so never missed) or by bind(), which calls start() and
        # clears this. Most sessions have none (an empty tuple).
        self._bindings: dict[str, tuple[str, ...]] = {}
        # Per binding, the last seq this process delivered and checkpointed: a commit whose
        # events start right after it is handed over as it is (no read).
        self._positions: dict[str, int] = {}
        self._timers: dict[str, threading.Timer] = {}
        # Batches delivered from a commit as it was, and reads of the log (benchmarks, tests).
        self.from_commits = 0
        self.log_reads = 0
        self._scheduling = 0  # commits handed to the pool and not yet scheduled
        self._wait = wait_random_exponential(multiplier=0.05, max=max_backoff_s)
        self._closed = False
        self._unsubscribe = store.watch.appends(self._on_appends)

    # -- public --------------------------------------------------------------------------

    def start(self) -> None:
        """Resume every binding from its checkpoint (the recovery step for delivery)."""
        with self._lock:
            self._bindings.clear()
        for binding in self._store.undelivered_bindings():
            self._schedule(binding.id)

    def register_callback(self, name: str, fn: Callable[[EventRecord], None]) -> None:
        """Make bindings of kind ``callback`` with target ``name`` deliver to ``fn``."""
        with self._lock:
            self._callbacks[name] = fn
        for binding in self._store.undelivered_bindings():
            if binding.sink_kind is SinkKind.CALLBACK and binding.target == name:
                with self._lock:  # it waited for this callback: retry now, not after backoff
                    timer = self._timers.pop(binding.id, None)
                    self._failures.pop(binding.id, None)
                if timer is not None:
                    timer.cancel()
                self._schedule(binding.id)

    def failures(self, binding_id: str) -> int:
        """How many times in a row the binding's sink has refused its events (0 once it
        delivers): what an operator, or a test, watches for a sink that is down."""
        with self._lock:
            return self._failures.get(binding_id, 0)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until every binding has caught up with the log (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                busy = bool(self._scheduling or self._busy or self._dirty)
            if not busy and not self._store.undelivered_bindings():
                return True
            time.sleep(0.01)
        return False

    def close(self, drain_s: float = 5.0) -> None:
        """Stop delivering. Deliveries already scheduled (an event committed just before,
        such as a session's ``closed``) get up to ``drain_s`` to finish first; whatever is
        left is delivered from its checkpoint at the next open."""
        deadline = time.monotonic() + drain_s
        with self._lock:
            while self._scheduling or self._busy or self._dirty:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(left)
        self._unsubscribe()
        with self._lock:
            self._closed = True
            for timer in self._timers.values():
                timer.cancel()
        self._pool.shutdown(wait=True)
        for sink in self._sinks.values():
            sink.close()  # closing a shared file sink twice is harmless

    # -- scheduling ----------------------------------------------------------------------

    def _on_appends(self, appended: Sequence[Appended], bound: Sequence[BindingRecord]) -> None:
        # Runs on the store's writer thread: no reads here. Bindings already known are
        # scheduled at once with the commit's events (one hand-off, to the projector);
        # sessions not seen yet are looked up on the pool. Most sessions have no binding:
        # their appends cost a dict lookup. Records are built on the pool, not here.
        session_ids = {entry[0] for entry in appended}
        with self._lock:
            self._learn(bound, appended)
            known = {sid: self._bindings.get(sid) for sid in session_ids}
            unknown = {sid for sid, ids in known.items() if ids is None}
            if unknown:
                self._scheduling += 1
        committed: dict[str, list[Appended]] = {}
        for entry in appended:  # in commit order, so each session's list is in seq order
            if known.get(entry[0]):
                committed.setdefault(entry[0], []).append(entry)
        for sid, entries in committed.items():
            for binding_id in known[sid] or ():
                self._schedule(binding_id, entries)
        if unknown:
            self._pool.submit(self._schedule_sessions, unknown)

    def _learn(self, bound: Sequence[BindingRecord], appended: Sequence[Appended]) -> None:
        """Bindings a commit created (under the lock). A session this commit created (its
        ``session_created`` at seq 1 is in it: only a spawn writes one) has exactly these
        bindings, most often none: known without a read. Another session's are added only
        if its bindings are known already."""
        for entry in appended:
            if entry[1] == 1:
                self._bindings.setdefault(entry[0], ())
        for binding in bound:
            sid = binding.session_id
            ids = self._bindings.get(sid)
            if ids is None:
                continue  # looked up with the rest of its bindings when it next commits
            if binding.id not in ids:
                self._bindings[sid] = (*ids, binding.id)
            # Where its checkpoint starts: a commit's events up to here need no pass.
            self._positions.setdefault(binding.id, binding.last_delivered_seq)

    def _schedule_sessions(self, session_ids: set[str]) -> None:
        try:
            for session_id in session_ids:
                found = self._store.bindings_of(session_id, active_only=False)
                with self._lock:
                    self._bindings[session_id] = tuple(b.id for b in found)
                for binding in found:
                    self._schedule(binding.id)
        finally:
            with self._lock:
                self._scheduling -= 1
                self._lock.notify_all()

    def _schedule(self, binding_id: str, committed: list[Appended] | None = None) -> None:
        """Pump the binding; ``committed``: what a commit just appended to its session
        (taken as it is if the binding's last delivery ended right before it)."""
        with self._lock:
            if self._closed or binding_id in self._timers:
                return  # a retry timer will pump it
            if binding_id in self._busy:
                self._dirty.add(binding_id)  # pumped again after, from the log
                return
            position = self._positions.get(binding_id)
            if committed and position is not None and position >= _last_seq(committed[-1]):
                return  # delivered already (a spawn's binding starts past its first event)
            self._busy.add(binding_id)
            if committed and position != committed[0][1] - 1:
                committed = None  # further behind (or not known here): read the log
        self._pool.submit(self._pump, binding_id, committed)

    def _pump(self, binding_id: str, committed: list[Appended] | None = None) -> None:
        retry_in: float | None = None
        try:
            retry_in = self._pump_until_caught_up(binding_id, committed)
        finally:
            with self._lock:
                self._busy.discard(binding_id)
                again = binding_id in self._dirty and retry_in is None
                self._dirty.discard(binding_id)
                if retry_in is not None and not self._closed:
                    timer = threading.Timer(retry_in, self._retry, (binding_id,))
                    timer.daemon = True
                    self._timers[binding_id] = timer
                    timer.start()
                self._lock.notify_all()
        if again:
            self._schedule(binding_id)

    def _retry(self, binding_id: str) -> None:
        with self._lock:
            self._timers.pop(binding_id, None)
        self._schedule(binding_id)

    # -- the projector -------------------------------------------------------------------

    def _pump_until_caught_up(
        self, binding_id: str, committed: list[Appended] | None = None
    ) -> float | None:
        """Deliver until the checkpoint reaches the log's end; a delay to retry after, or None."""
        while True:
            sink = self._sinks.get(binding_id)
            binding: BindingRecord | None = None
            events = [e for entry in committed or () for e in appended_events(entry)]
            if events and sink is not None and len(events) <= self._batch_size:
                batch = events  # right behind the last delivery: no read
                self.from_commits += 1
            else:
                binding = self._store.get_binding(binding_id)
                if binding is None:
                    return None
                batch = self._store.events(
                    binding.session_id, binding.last_delivered_seq, self._batch_size
                )
                self.log_reads += 1
                if not batch:
                    return None
            committed = None
            try:
                if binding is not None:  # where a missing callback is a sink failure
                    sink = self._sink_for(binding)
                assert sink is not None
                sink.deliver(batch)
            except Exception as exc:  # any sink failure: keep the checkpoint, back off
                failures = self._failures.get(binding_id, 0) + 1
                self._failures[binding_id] = failures
                state = RetryCallState(None, None, (), {})  # type: ignore[arg-type]
                state.attempt_number = failures
                delay = float(self._wait(state))
                log.warning(
                    "sink of binding %s rejected events (%s); retry %d in %.2fs",
                    binding_id,
                    exc,
                    failures,
                    delay,
                )
                return delay
            self._failures.pop(binding_id, None)
            fault_point("delivery.before_checkpoint")
            position = self._store.advance_checkpoint(binding_id, batch[-1].seq)
            with self._lock:
                self._positions[binding_id] = position
            if len(batch) < self._batch_size:
                # The read reached the log's end: a commit after it marked this binding
                # dirty (``_schedule``), so a read now to find nothing would be wasted.
                return None

    def _sink_for(self, binding: BindingRecord) -> Sink:
        sink = self._sinks.get(binding.id)
        if sink is not None:
            return sink
        if binding.sink_kind is SinkKind.JSONL:
            path = os.path.abspath(binding.target)
            with self._lock:
                if path not in self._files:
                    self._files[path] = JsonlFileSink(path, self._store.identity)
                sink = self._files[path]
        elif binding.sink_kind is SinkKind.PARENT:
            child = self._store.get_session(binding.session_id)
            as_prompt = bool(child.metadata.get("announcePrompt", True))
            sink = _WakingAnnounceSink(
                AnnounceSink(self._store, binding.session_id, binding.target, as_prompt), self
            )
        elif binding.sink_kind is SinkKind.CALLBACK:
            with self._lock:
                fn = self._callbacks.get(binding.target)
            if fn is None:
                raise SinkUnavailable(f"no callback registered as {binding.target!r}")
            sink = CallbackSink(fn)
        else:  # pragma: no cover - SinkKind is closed
            raise SinkUnavailable(f"unknown sink kind {binding.sink_kind}")
        self._sinks[binding.id] = sink
        return sink


def _last_seq(entry: Appended) -> int:
    return entry[1] + len(entry[3]) - 1


class _WakingAnnounceSink:
    """An ``AnnounceSink`` that tells the supervisor when a parent got a follow-up."""

    def __init__(self, inner: AnnounceSink, service: DeliveryService) -> None:
        self.inner = inner
        self.service = service

    def deliver(self, events: Sequence[EventRecord]) -> None:
        self.inner.deliver(events)
        while self.inner.parents_notified:
            parent = self.inner.parents_notified.pop()
            if self.service.on_parent_work is not None:
                self.service.on_parent_work(parent)

    def close(self) -> None:
        self.inner.close()
