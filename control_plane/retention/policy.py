"""What a gc may delete, and the checks of its input: every mistake is found before
anything is read or deleted, and said in one line (``RetentionRefused``, exit 2).

Light on purpose (the standard library and the state names): the configuration's
``[retention]`` section validates with it, and reading the configuration must not load the
store.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from state_machines import ControlPlaneError, SessionState

if TYPE_CHECKING:
    from store.queries.retention import RetentionRule

DEFAULT_OLDER_THAN = "30d"
# idle only when asked: an idle session can still be prompted, closed and error ones are
# done with (an error one is resumed only by a new prompt, which nobody sent for 30 days).
DEFAULT_STATES = (SessionState.CLOSED.value, SessionState.ERROR.value)
# What --state may name. Sessions being created or in a turn are never deleted.
CHOOSABLE = (SessionState.CLOSED.value, SessionState.IDLE.value, SessionState.ERROR.value)


class RetentionRefused(ControlPlaneError):
    """Bad retention input: a duration, a state, an archive directory. Nothing was done."""


def parse_duration(text: str, what: str = "duration") -> float:
    """``30d``, ``12h``, ``1d12h`` -> seconds (``control_plane/timespec.py``, as every
    duration the CLI reads), refused as retention input."""
    from control_plane.timespec import TimeSpecError
    from control_plane.timespec import parse_duration as seconds_in

    try:
        return seconds_in(text)
    except TimeSpecError as exc:
        raise RetentionRefused(f"{what}: {exc}") from None


def parse_states(values: Iterable[str], what: str = "states") -> tuple[str, ...]:
    """State names, one per value or comma-separated, checked against ``CHOOSABLE``; in
    a fixed order, each once."""
    names = [part.strip() for value in values for part in value.split(",") if part.strip()]
    if not names:
        raise RetentionRefused(f"{what}: name at least one of {', '.join(CHOOSABLE)}")
    for name in names:
        if name not in CHOOSABLE:
            known = {s.value for s in SessionState}
            why = (
                "sessions being created or in a turn are never deleted"
                if name in known
                else "unknown state"
            )
            raise RetentionRefused(f"{what}: {name!r}: {why}; choose from {', '.join(CHOOSABLE)}")
    return tuple(s for s in CHOOSABLE if s in names)


def checked_archive_dir(path: str | os.PathLike[str], create: bool = True) -> Path:
    """The archive directory, absolute, after proving a file can be written in it
    (permissions, a read-only mount, a full disk show up here, before anything is deleted).
    With ``create`` a missing directory is made; without (a dry run, which changes
    nothing), the nearest existing parent must be writable."""
    directory = Path(os.path.expanduser(os.fspath(path))).absolute()
    if not create:
        existing = directory
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise RetentionRefused(f"archive directory {directory} is not writable")
        return directory
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory, prefix=".acpctl-gc-probe-") as probe:
            probe.write(b"x")
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise RetentionRefused(f"archive directory {directory} is not writable: {reason}") from None
    return directory


@dataclass(frozen=True)
class RetentionPolicy:
    """One gc's input. Built from flags or the ``[retention]`` section; checked on
    construction (``RetentionRefused``)."""

    older_than: str = DEFAULT_OLDER_THAN
    states: tuple[str, ...] = DEFAULT_STATES
    archive_dir: Path | None = None
    force: bool = False  # delete trees whose output a sink has not received too
    include_imported: bool = False  # imported transcripts too (kept by default)
    dry_run: bool = False
    older_than_s: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "older_than_s", parse_duration(self.older_than, "older than"))
        object.__setattr__(self, "states", parse_states(self.states))

    def rule(self, now: float | None = None) -> RetentionRule:
        """The store's form of it, with the cutoff taken now (or at ``now``)."""
        from store.queries.retention import RetentionRule

        at = time.time() if now is None else now
        return RetentionRule(
            frozenset(self.states), at - self.older_than_s, self.force, self.include_imported
        )


@dataclass(frozen=True)
class ScheduledGc:
    """``[retention]`` in a long-lived process: the policy, run every ``interval_s``."""

    policy: RetentionPolicy
    interval_s: float
