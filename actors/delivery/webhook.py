"""One webhook's deliverer: the hook's events of the store-wide log, POSTed in id order,
each at least once, the checkpoint moved after each answer.

A thread of its own per hook, woken by commits that appended one of its kinds (and every
``poll_s`` for other processes' commits): it never runs on a turn's path, and a receiver
that is slow or down holds this thread only.

Per notification: POST (``webhook_post.post``) until accepted or refused, retried with
tenacity's jittered exponential backoff (``Retry-After`` honoured) while the receiver fails;
then ``advance_hook`` to the event's id in its own commit. A ``kill -9`` after the
receiver's answer but before that commit sends that one notification again at the next
start (the ``Idempotency-Key`` lets the receiver see it); nothing the checkpoint covers is
sent twice. Events the hook does not want move the checkpoint without a send, in memory,
written now and then (``persist_every_s``): after a crash they are skipped again.

Store-wide order: id order is commit order on SQLite (one writer takes the ids). On
PostgreSQL an id is taken before its transaction commits, so a lower id may appear after a
higher one is visible: the deliverer reads up to the first gap in the ids only, and waits
``gap_wait_s`` for a gap to fill before it takes it for a rolled-back transaction's
(docs/notify.md, "Delivery").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tenacity import RetryCallState, Retrying, retry_if_result, wait_random_exponential

from actors import telemetry
from actors.delivery.hooks import HookSpec, NotifyType
from actors.delivery.notifications import Notification, classify, notification
from actors.delivery.webhook_post import Answer, post
from store import Store
from store.ops import notify as notify_ops
from store.ownership import this_owner
from store.queries import notify as notify_queries
from store.queries.notify import NotifyEvent

log = logging.getLogger("acpctl.notify")

BATCH = 64


class HookDeliverer:
    def __init__(
        self,
        store: Store,
        hook: HookSpec,
        *,
        poll_s: float = 1.0,
        first_backoff_s: float = 0.5,
        max_backoff_s: float = 60.0,
        gap_wait_s: float = 5.0,
        persist_every_s: float = 10.0,
        send: Callable[[HookSpec, Notification], Answer] = post,
    ) -> None:
        self.hook = hook
        self._store = store
        self._owner = this_owner()
        self._poll_s = poll_s
        self._gap_wait_s = gap_wait_s
        self._persist_every_s = persist_every_s
        self._send = send
        self._wait = wait_random_exponential(multiplier=first_backoff_s, max=max_backoff_s)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._cursor: int | None = None  # None: not holding the hook
        self._persisted = 0  # the checkpoint as last written
        self._persisted_at = 0.0
        self._gap: tuple[int, float] | None = None  # PostgreSQL: (first missing id, seen at)
        self._thread = threading.Thread(
            target=self._run, name=f"notify-{hook.label}"[:15], daemon=True
        )
        self.delivered = 0  # accepted notifications (tests, notify status)

    # -- control (any thread) ------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def close(self, timeout: float = 2.0) -> None:
        """Stop: a POST in flight may finish (its answer is not waited for past
        ``timeout``); the checkpoint is written and the hook released for other processes."""
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            return  # a send still blocked: its process exits; the next start resends it
        if self._cursor is not None:
            self._persist(force=True)
            self._store.write(lambda ctx: notify_ops.release_hook(ctx, self.hook.key, self._owner))

    @property
    def holding(self) -> bool:
        return self._cursor is not None

    # -- the loop (its thread) -----------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                more = self._step()
            except Exception:  # a store fault: keep the thread, try again after a poll
                if self._stopping.is_set():
                    break  # the store closed under a send that outlived close(): resent later
                log.exception("webhook %s: delivery step failed", self.hook.label)
                more = False
            if not more:
                self._wake.wait(self._poll_s)
                self._wake.clear()

    def _step(self) -> bool:
        """One pass; True when there may be more to deliver at once."""
        if self._cursor is None and not self._take():
            return False
        assert self._cursor is not None
        cursor = self._cursor
        kinds = self.hook.kinds
        found, horizon = self._store.read(
            lambda conn: notify_queries.pending(conn, cursor, kinds, BATCH, self._gap_settled)
        )
        for item in found:
            if self._stopping.is_set():
                return False  # a close: nothing more is sent (a send in flight ends alone)
            kind = classify(item, self.hook.events)
            if kind is not None and not self._deliver(item, kind):
                return False  # stopping, or the hook was taken over
            self._cursor = item.event.id
        if len(found) < BATCH:
            self._cursor = max(self._cursor, horizon)
            self._persist()
            return False
        return True

    def _take(self) -> bool:
        key = self.hook.key
        if self._store.read(lambda c: notify_queries.held_elsewhere(c, key, self._owner)):
            return False
        cursor = self._store.write(lambda ctx: notify_ops.take_hook(ctx, key, self._owner))
        if cursor is None:
            return False
        log.info("webhook %s: delivering from event %d", self.hook.label, cursor)
        self._cursor = self._persisted = cursor
        self._persisted_at = time.monotonic()
        return True

    def _gap_settled(self, missing: int) -> bool:
        now = time.monotonic()
        if self._gap is None or self._gap[0] != missing:
            self._gap = (missing, now)
        return now - self._gap[1] >= self._gap_wait_s

    # -- one notification ----------------------------------------------------------------

    def _deliver(self, item: NotifyEvent, kind: NotifyType) -> bool:
        note = notification(item, kind, self.hook.console_url, self._store.identity)
        retrying = Retrying(
            retry=retry_if_result(lambda answer: answer.outcome == "retry"),
            wait=self._backoff,
            stop=lambda _state: self._stopping.is_set(),
            sleep=self._sleep,
            before_sleep=self._failed,
            retry_error_callback=lambda _state: None,
        )
        answer: Answer | None = retrying(self._send, self.hook, note)
        if answer is None:
            return False  # stopping: not acknowledged, sent again at the next start
        if answer.outcome == "refused":
            telemetry.NOTIFY_FAILURES.labels(self.hook.label, answer.reason).inc()
            log.warning(
                "webhook %s refused event %d for good (%s): skipped",
                self.hook.label,
                item.event.id,
                answer.detail,
            )
        else:
            telemetry.NOTIFY_DELIVERED.labels(self.hook.label).inc()
            self.delivered += 1
        event_id = item.event.id
        if not self._store.write(
            lambda ctx: notify_ops.advance_hook(ctx, self.hook.key, self._owner, event_id)
        ):
            log.warning("webhook %s: taken over by another process", self.hook.label)
            self._cursor = None
            return False
        self._persisted, self._persisted_at = event_id, time.monotonic()
        return True

    def _sleep(self, seconds: float) -> None:
        self._stopping.wait(seconds)  # a close cuts the backoff short

    def _backoff(self, state: RetryCallState) -> float:
        delay = float(self._wait(state))
        answer = state.outcome.result() if state.outcome is not None else None
        if isinstance(answer, Answer) and answer.retry_after_s is not None:
            delay = max(delay, min(answer.retry_after_s, 3600.0))
        return delay

    def _failed(self, state: RetryCallState) -> None:
        answer = state.outcome.result() if state.outcome is not None else None
        if not isinstance(answer, Answer):
            return
        telemetry.NOTIFY_FAILURES.labels(self.hook.label, answer.reason).inc()
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning(
            "webhook %s failed (%s: %s); attempt %d, next in %.1fs",
            self.hook.label,
            answer.reason,
            answer.detail,
            state.attempt_number,
            wait,
        )

    def _persist(self, force: bool = False) -> None:
        """Write a checkpoint moved past events the hook does not want, now and then."""
        cursor = self._cursor
        if cursor is None or cursor <= self._persisted:
            return
        if not force and time.monotonic() - self._persisted_at < self._persist_every_s:
            return
        if self._store.write(
            lambda ctx: notify_ops.advance_hook(ctx, self.hook.key, self._owner, cursor)
        ):
            self._persisted, self._persisted_at = cursor, time.monotonic()
        else:
            self._cursor = None

    def lag_s(self) -> float:
        """Seconds the oldest event of the hook's kinds not yet past its checkpoint has
        waited (0: caught up)."""
        key, kinds, cursor = self.hook.key, self.hook.kinds, self._cursor
        oldest = self._store.read(lambda c: notify_queries.hook_lag(c, key, cursor, kinds))
        return 0.0 if oldest is None else max(0.0, time.time() - oldest)
