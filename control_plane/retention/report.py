"""What a gc pass did, for ``acpctl gc`` (JSON or text) and the schedule's log."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from control_plane.retention.pacing import LockTimes


@dataclass(frozen=True)
class TreeDone:
    """A tree deleted (or, in a dry run, that would be)."""

    root: str
    sessions: list[str]
    events: int
    archive: dict[str, Any] | None = None  # path, sha256, bytes
    resumed: bool = False  # an earlier gc claimed it and did not finish
    forced: bool = False  # a sink had not received all of it (--force)
    finished: bool = True  # False: stopped half-way (the next gc finishes it)

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "sessions": self.sessions,
            "events": self.events,
            "archive": self.archive,
            "resumed": self.resumed,
            "forced": self.forced,
            "finished": self.finished,
        }


@dataclass(frozen=True)
class TreeKept:
    root: str
    sessions: int
    reason: str  # store.queries.retention.Kept
    detail: str
    undelivered: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "sessions": self.sessions,
            "reason": self.reason,
            "detail": self.detail,
            "undelivered": self.undelivered,
        }


@dataclass(frozen=True)
class TreeFailed:
    root: str
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"root": self.root, "error": self.error}


@dataclass
class SpaceReport:
    backend: str
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    reclaim: str = ""  # how freed space is given back: incremental-vacuum, reused, autovacuum
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "before": self.before,
            "after": self.after,
            "reclaim": self.reclaim,
            "note": self.note,
        }


@dataclass
class GcReport:
    store: str
    dry_run: bool
    older_than: str
    states: list[str]
    cutoff: str  # ISO 8601, UTC
    archive_dir: str | None
    deleted: list[TreeDone] = field(default_factory=list)
    kept: list[TreeKept] = field(default_factory=list)
    failed: list[TreeFailed] = field(default_factory=list)
    locks: LockTimes = field(default_factory=LockTimes)
    space: SpaceReport | None = None
    compacted: bool = False

    @property
    def sessions_deleted(self) -> int:
        return sum(len(t.sessions) for t in self.deleted)

    @property
    def events_deleted(self) -> int:
        return sum(t.events for t in self.deleted)

    def to_json(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "dryRun": self.dry_run,
            "olderThan": self.older_than,
            "states": self.states,
            "cutoff": self.cutoff,
            "archiveDir": self.archive_dir,
            # In a dry run: what would be deleted.
            "deleted": [t.to_json() for t in self.deleted],
            "kept": [t.to_json() for t in self.kept],
            "failed": [t.to_json() for t in self.failed],
            "transactions": self.locks.to_json(),
            "space": None if self.space is None else self.space.to_json(),
            "compacted": self.compacted,
        }

    def summary(self) -> str:
        """One line for a log."""
        verb = "would delete" if self.dry_run else "deleted"
        line = (
            f"{verb} {len(self.deleted)} trees ({self.sessions_deleted} sessions, "
            f"{self.events_deleted} events), kept {len(self.kept)}, failed {len(self.failed)}"
        )
        if self.locks.count:
            locks = self.locks.to_json()
            line += (
                f"; {locks['count']} transactions, lock max {locks['maxMs']} ms, "
                f"p99 {locks['p99Ms']} ms"
            )
        return line
