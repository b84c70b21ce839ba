"""Lifecycle writes that must land: a turn's claim or end, an agent start or exit, through a
storage fault, and in order behind the turn's recorded updates."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from tenacity import Retrying, retry_if_exception_type, stop_when_event_set, wait_exponential

from state_machines import ControlPlaneError, StoreUnavailable
from store import Store, ops
from store.writer import WriteContext

log = logging.getLogger(__name__)
T = TypeVar("T")


def write_until_taken(
    store: Store, fn: Callable[[WriteContext], T], stopping: threading.Event, session_id: str
) -> T:
    """Run the write, retried while the store refuses writes for now (its lock held
    elsewhere, the disk full), so no session is left ``running`` with no turn or a command
    claimed by nobody; the process shutting down (``stopping``) ends the retries, and
    recovery finishes the work at the next open. Other errors are raised at once."""
    try:
        return store.write(fn)  # the common case pays nothing for the retrying
    except StoreUnavailable as exc:
        log.warning(
            "session %s: the store refused a write (%s); retrying until it takes it",
            session_id,
            exc,
        )

    def pause(seconds: float) -> None:
        stopping.wait(seconds)  # a shutdown ends the pause (and the retries)

    retrying = Retrying(
        retry=retry_if_exception_type(StoreUnavailable),
        wait=wait_exponential(multiplier=0.05, max=2.0),
        stop=stop_when_event_set(stopping),
        sleep=pause,
        reraise=True,
    )
    result: T = retrying(store.write, fn)
    return result


def await_turn_end(
    store: Store,
    committed: Future[T] | None,
    write: Callable[[WriteContext], T],
    stopping: threading.Event,
    session_id: str,
) -> T:
    """Wait for a turn's ending write, submitted behind (and with) the turn's last recorded
    updates (``turn_end.py``), so an outcome never commits before its updates; raise what
    the write raised, as ``store.write`` would. The recorder retries while the store refuses
    writes; a shutdown ends the wait. ``committed`` None: the recorder had lost frames
    before it, so the write goes straight to the store (``write_until_taken``)."""
    if committed is None:
        return write_until_taken(store, write, stopping, session_id)
    while True:
        try:
            return committed.result(timeout=1.0)
        except TimeoutError:
            if stopping.is_set():
                raise StoreUnavailable(
                    f"session {session_id}: shutting down before the store took the turn's "
                    "end; recovery finishes it at the next open"
                ) from None


def spare_interrupted_turn(
    store: Store, session_id: str, epoch: int, command_ids: tuple[str, ...]
) -> None:
    """Ctrl-C (an orderly stop) mid-turn: an interruption, not a failed attempt
    (``ops.spare_attempts``). Best effort: a store refusing it now leaves the attempt
    counted, as after a crash."""
    try:
        store.write(lambda ctx: ops.spare_attempts(ctx, session_id, epoch, command_ids))
    except ControlPlaneError as exc:
        log.warning("session %s: sparing the interrupted attempt failed: %s", session_id, exc)
