"""Giving a session up when its actor stops, through a storage fault.

The release (no owner, only at the epoch the actor took it with: ``ops.release``) is tried
once on the actor's thread, in ``on_stop``. A store that refuses it for now
(``StoreUnavailable``: its lock held elsewhere, the database unreachable for a moment) used
to leave the session owned by this live process: no other process or node takes a session
whose owner lives, so its next prompt waited for this process to end. A refused release is
now retried off the actor's thread, with exponential backoff, for up to ``PATIENCE_S``: the
actor's stop is not held up by the fault, and one thread retries every refused release of
the process together (one write each round). A late release harms nothing: a newer actor
of the session took it at a higher epoch, and the release then changes nothing.

A shutdown ends the retries: the process ends, and the other processes give its sessions up
(``NodeLease.release_dead_owners``: its process gone, or its lease given up).
"""

from __future__ import annotations

import logging
import threading
import time

from tenacity import Retrying, retry_if_exception_type, wait_exponential

from protocol.os_thread_name import name_this_thread
from state_machines import ControlPlaneError, StoreUnavailable
from store import Store, ops
from store.ownership import this_owner
from store.writer import WriteContext

log = logging.getLogger(__name__)

# How long a refused release is retried before it is left to the process's end.
PATIENCE_S = 600.0
# The first try, on the actor's thread: past this the stop goes on and the retries take over
# (a write that timed out may still commit; a second release is a no-op).
FIRST_TRY_S = 30.0


class PendingReleases:
    """The releases the store refused, retried together on one thread while any is left."""

    def __init__(self, patience_s: float = PATIENCE_S) -> None:
        self._patience_s = patience_s
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], float] = {}  # (session, epoch) -> give up at
        self._thread: threading.Thread | None = None
        self.retried = 0  # releases that went through on a retry (tests, logs)

    def release(self, store: Store, session_id: str, epoch: int, stopping: threading.Event) -> None:
        """Give the session up; on the actor's thread. Refused for now: retried later."""
        try:
            store.write(lambda ctx: ops.release(ctx, session_id, this_owner(), epoch), FIRST_TRY_S)
            return
        except (StoreUnavailable, TimeoutError) as exc:
            if stopping.is_set():  # the process ends: so does its ownership
                log.warning("releasing session %s failed at shutdown: %s", session_id, exc)
                return
            log.warning("releasing session %s failed, retried: %s", session_id, exc)
        except ControlPlaneError:  # the store refuses for good (damaged, replaced)
            log.exception("releasing session %s failed", session_id)
            return
        with self._lock:
            self._pending[(session_id, epoch)] = time.monotonic() + self._patience_s
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, args=(store, stopping), name="release-retry", daemon=True
                )
                self._thread.start()

    def pending(self) -> list[str]:
        with self._lock:
            return sorted(sid for sid, _ in self._pending)

    def _run(self, store: Store, stopping: threading.Event) -> None:
        name_this_thread()

        def pause(seconds: float) -> None:
            stopping.wait(seconds)  # a shutdown ends the pause (and the retries)

        retrying = Retrying(
            retry=retry_if_exception_type((StoreUnavailable, TimeoutError)),
            wait=wait_exponential(multiplier=0.1, max=5.0),
            stop=lambda _state: stopping.is_set() or not self._drop_expired(),
            sleep=pause,
            reraise=True,
        )
        while True:
            done = False
            try:
                retrying(self._round, store)
                done = True
            except (StoreUnavailable, TimeoutError) as exc:  # out of patience, or shutdown
                log.error("releasing sessions %s given up: %s", self.pending(), exc)
            except Exception:  # the store refuses for good, or closed: nothing to retry
                log.exception("releasing sessions %s failed", self.pending())
            with self._lock:  # one section: a release queued now finds a thread, or none
                if done and self._pending and not stopping.is_set():
                    continue  # refused while this round ran: their turn now
                self._pending.clear()
                self._thread = None
                return

    def _round(self, store: Store) -> None:
        """One write for every pending release; those it made are no longer pending. One
        past its patience is never written."""
        if not self._drop_expired():
            return
        with self._lock:
            batch = list(self._pending)
        me = this_owner()

        def release_all(ctx: WriteContext) -> None:
            for session_id, epoch in batch:
                ops.release(ctx, session_id, me, epoch)

        store.write(release_all)
        with self._lock:
            for key in batch:
                self._pending.pop(key, None)
            self.retried += len(batch)
        log.info("released sessions %s on a retry", sorted(sid for sid, _ in batch))

    def _drop_expired(self) -> bool:
        """Forget the releases past their patience; whether any is left."""
        now = time.monotonic()
        with self._lock:
            for key, give_up_at in list(self._pending.items()):
                if now >= give_up_at:
                    del self._pending[key]
                    log.error(
                        "releasing session %s given up after %.0f s", key[0], self._patience_s
                    )
            return bool(self._pending)
