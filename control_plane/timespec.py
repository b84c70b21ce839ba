"""Durations and points in time as people type them on a command line or in the
configuration: ``30d``, ``12h``, ``90m``, ``45s`` (or a combination, ``1d12h``), and for a
point in time also an ISO 8601 date or date-time (``2026-12-01``, ``2026-12-01T08:00Z``)."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from state_machines import ControlPlaneError

_UNITS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)([wdhms]))+")
_PART = re.compile(r"(\d+(?:\.\d+)?)([wdhms])")


class TimeSpecError(ControlPlaneError, ValueError):
    """A duration or a point in time that cannot be read."""


def parse_duration(text: str) -> float:
    """Seconds in ``text`` (``30d``, ``1d12h``, ``90m``); ``TimeSpecError`` otherwise."""
    spec = text.strip().lower()
    if not _DURATION.fullmatch(spec):
        raise TimeSpecError(
            f"{text!r} is not a duration: a number and a unit, w d h m s (30d, 12h, 1d12h)"
        )
    return sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(spec))


def parse_since(text: str, now: float | None = None) -> float:
    """A point in time as unix seconds: ``text`` ago (a duration), or an ISO date or
    date-time (UTC unless it names its offset)."""
    try:
        return (time.time() if now is None else now) - parse_duration(text)
    except TimeSpecError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise TimeSpecError(
            f"{text!r} is neither a duration (7d, 12h) nor an ISO date (2026-12-01)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
