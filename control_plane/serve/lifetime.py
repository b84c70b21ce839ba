"""How long ``acpctl serve`` runs, and the exit code it reports.

Serve's one normal end is its client closing stdin: exit 0. Every other end is an error the
operator has to see (an editor shows "agent exited" and little else), so it exits non-zero
with a log line on stderr saying why:

- the store refused every write for ``timeouts.store_fault_s`` (disk full, a lock held by
  another process, the file deleted, replaced or damaged): exit 1; nothing acknowledged is
  lost and the next serve finishes the interrupted turns (see docs/operations.md);
- stdin failed (not a plain end of file), or the connection stopped while stdin was still
  open (stdout closed by the client, an error inside the SDK): exit 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from state_machines import StoreError, StoreUnavailable

log = logging.getLogger("acpctl.serve")

STORE_CHECK_INTERVAL_S = 1.0


StoreFault = Callable[[float], StoreError | None]  # ControlPlane.store_fault


async def watch_store(store_fault: StoreFault, fault_s: float, interval_s: float) -> StoreError:
    """Return (as the reason to stop) once the store has refused writes for ``fault_s``, or
    refuses them for good (its file deleted, replaced or damaged)."""
    while True:
        await asyncio.sleep(interval_s)
        fault = store_fault(fault_s)
        if fault is not None:
            return fault


async def run_until_exit(
    listen: Coroutine[Any, Any, Any],
    pump: asyncio.Task[None],
    store_fault: StoreFault,
    fault_s: float,
    interval_s: float = STORE_CHECK_INTERVAL_S,
) -> int:
    """Run the connection until it ends or the store fails for good; the exit code."""
    listening = asyncio.ensure_future(listen)
    watching = asyncio.ensure_future(watch_store(store_fault, fault_s, interval_s))
    try:
        await asyncio.wait({listening, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (listening, watching):
            task.cancel()
        for task in (listening, watching):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    if watching.done() and not watching.cancelled() and watching.exception() is None:
        fault = watching.result()
        how = (
            f"refused every write for {fault_s:.0f}s"
            if isinstance(fault, StoreUnavailable)
            else "refuses every write from now on"
        )
        log.error(
            "acpctl serve: exiting 1, the store %s: %s. Nothing acknowledged is lost; start "
            "serve again once the store takes writes",
            how,
            fault,
        )
        return 1
    if watching.done() and not watching.cancelled():
        log.error("acpctl serve: exiting 1, watching the store failed: %r", watching.exception())
        return 1
    if listening.done() and not listening.cancelled() and listening.exception() is not None:
        log.error("acpctl serve: exiting 1, the connection failed: %r", listening.exception())
        return 1
    if not pump.done():
        log.error("acpctl serve: exiting 1, the connection ended while stdin was still open")
        return 1
    if pump.cancelled() or pump.exception() is not None:
        reason = "cancelled" if pump.cancelled() else repr(pump.exception())
        log.error("acpctl serve: exiting 1, reading stdin failed: %s", reason)
        return 1
    return 0  # the client closed stdin: the one normal end
