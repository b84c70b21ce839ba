"""Lifecycle writes that must land: a turn's claim or end, an agent start or exit."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from tenacity import Retrying, retry_if_exception_type, stop_when_event_set, wait_exponential

from state_machines import StoreUnavailable
from store import Store, WriteContext

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
