"""What the subagent bridge accepts: the limits every request is held to (see the bridge's
docstring for why each), the validation of ``wait`` and spawn keys, the refusal type, and
where a process's socket lives."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

from state_machines import ControlPlaneError

MAX_REQUEST_BYTES = 1024 * 1024
BRIDGE_WORKERS = 16  # threads of the bridge's own pool (see the module docstring)
PER_SESSION_IN_FLIGHT = 2  # a session's requests on the pool at once
MAX_WAIT_S = 60.0  # subagent_result waits longer than this are cut to it
WAIT_POLL_S = 1.0  # a parked wait reads again this often (a commit of another process)
MAX_KEY_CHARS = 200  # longest spawn idempotencyKey accepted
STOP_GRACE_S = 5.0  # how long stop() lets requests already on the pool finish


class BridgeRefused(ControlPlaneError):
    """A request the bridge will not carry out (bad secret, not a descendant, bad op)."""


def socket_path(store_path: str, pid: int | None = None) -> str:
    """This process's socket: next to the store when the path fits a Unix socket (108
    bytes), else in the temp dir; the pid keeps two processes on one store apart."""
    pid = os.getpid() if pid is None else pid
    beside = f"{store_path}.{pid}.sock"
    if "://" not in store_path and len(beside.encode()) < 100:  # a URL: no directory
        return beside
    digest = hashlib.sha256(store_path.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"acpctl-{digest}.{pid}.sock")


def parse_wait(value: Any) -> tuple[float, bool]:
    """``subagent_result``'s ``wait``: (seconds, whether it was cut to ``MAX_WAIT_S``).
    Absent means 0; anything but a finite JSON number >= 0 is refused."""
    if value is None:
        return 0.0, False
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BridgeRefused(f"wait must be a number of seconds (finite, >= 0), not {_shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise BridgeRefused(f"wait must be a finite number of seconds >= 0, not {value!r}")
    if value < 0:
        raise BridgeRefused(f"wait must be >= 0 seconds, not {value!r}")
    if value > MAX_WAIT_S:  # compared before float(): a huge JSON integer stays an int
        return MAX_WAIT_S, True
    return float(value), False


def spawn_key(parent_id: str, value: Any) -> str | None:
    """The stored spawn key for the key a parent's agent chose: namespaced by the parent,
    so it never equals a host's key or another parent's (see the module docstring)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise BridgeRefused(f"idempotencyKey must be a non-empty string, not {_shown(value)}")
    if len(value) > MAX_KEY_CHARS:
        raise BridgeRefused(f"idempotencyKey is longer than {MAX_KEY_CHARS} characters")
    return f"subagent:{parent_id}:{value}"


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass
class _Share:
    """One session's share of the pool, dropped when no request of the session is left."""

    semaphore: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(PER_SESSION_IN_FLIGHT)
    )
    users: int = 0
