"""Named fault-injection points at commit boundaries (DBOS's habit), for crash tests.

A point does nothing unless armed, either in-process with ``arm(name, action)`` or for a child
process through ``ACPCP_FAULTS="name=kill,other=raise"``. ``kill`` sends SIGKILL to the own
process (a real kill -9: no cleanup, no flush, no atexit); ``raise`` raises ``InjectedFault``.
Arming is read once per point hit, so the cost when nothing is armed is one dict lookup.
"""

from __future__ import annotations

import os
import signal
import threading

ENV_VAR = "ACPCP_FAULTS"


class InjectedFault(RuntimeError):
    """Raised by a fault point armed with ``raise``."""


def _parse(spec: str) -> dict[str, str]:
    armed: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        armed[name] = action or "kill"
    return armed


_armed = _parse(os.environ.get(ENV_VAR, ""))
_counts: dict[str, int] = {}
_lock = threading.Lock()


def arm(name: str, action: str = "raise") -> None:
    with _lock:
        _armed[name] = action


def fault_point(name: str) -> None:
    """Mark a place where a crash must leave the store consistent."""
    action = _armed.get(name)
    if action is None:
        return
    if action.startswith("after:"):
        # "after:N:kill" fires on the N+1th hit: lets a test crash mid-way through a run.
        _, count, final = action.split(":", 2)
        with _lock:
            _counts[name] = _counts.get(name, 0) + 1
            if _counts[name] <= int(count):
                return
        action = final
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedFault(f"fault point {name!r}")
