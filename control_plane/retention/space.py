"""Giving space back after a gc (store/space.py has the why).

SQLite, ``auto_vacuum = INCREMENTAL``: the free pages go back to the file system by
``PRAGMA incremental_vacuum`` in short write transactions, paced like the deletion, then a
passive checkpoint lets the file shrink. ``NONE`` (a store created before migration 0012):
the pages stay free inside the file and later writes reuse them; ``acpctl gc --compact``
rewrites the store once so that it can give them back. PostgreSQL: autovacuum reclaims the
space of deleted rows; nothing to do here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from control_plane.retention.pacing import Pacer, paced_write
from control_plane.retention.report import SpaceReport
from store import Store
from store.location import Backend
from store.ops import retention as retention_ops
from store.space import Checkpointer, SqliteSpace, sqlite_space

NOTE_REUSED = (
    "auto_vacuum is NONE (a store created before 0012): the freed pages are reused by later "
    "writes but not returned to the file system; 'acpctl gc --compact' (with the store to "
    "itself) rewrites it once with incremental vacuum"
)
NOTE_POSTGRES = "PostgreSQL: autovacuum reclaims the deleted rows' space"


@contextmanager
def wal_keeper(store: Store) -> Iterator[Callable[[], None] | None]:
    """SQLite: what to run after each deletion transaction to keep the WAL short (a passive
    checkpoint on a connection of its own, store/space.py); None on PostgreSQL."""
    if store.backend is not Backend.SQLITE:
        yield None
        return
    checkpointer = Checkpointer(store.location.target)
    try:
        yield checkpointer.passive
    finally:
        checkpointer.close()


def measure(store: Store) -> SqliteSpace | None:
    """The SQLite file's figures (None on PostgreSQL)."""
    if store.backend is not Backend.SQLITE:
        return None
    return store.read(lambda c: sqlite_space(c, store.location.target))


def start_report(store: Store) -> SpaceReport:
    report = SpaceReport(store.backend.value)
    before = measure(store)
    if before is None:
        report.reclaim, report.note = "autovacuum", NOTE_POSTGRES
        return report
    report.before = before.to_json()
    if before.auto_vacuum == "incremental":
        report.reclaim = "incremental-vacuum"
    else:
        report.reclaim, report.note = "reused", NOTE_REUSED
    return report


def give_back(
    store: Store, report: SpaceReport, pacer: Pacer, checkpoint: Callable[[], None] | None
) -> None:
    """After deletions: vacuum free pages away where the store allows it, then the figures
    after (the report's ``after``)."""
    if report.before is None:
        return
    if report.reclaim == "incremental-vacuum":
        _vacuum(store, pacer, checkpoint)
    if checkpoint is not None:
        checkpoint()  # the file shrinks by what the vacuum gave back, now
    after = measure(store)
    report.after = None if after is None else after.to_json()


def _vacuum(store: Store, pacer: Pacer, checkpoint: Callable[[], None] | None) -> None:
    """Incremental vacuum in paced transactions until no free page is left (or stopped)."""
    while True:
        (freed, left), lock_s = paced_write(
            store, pacer, "pages", retention_ops.incremental_vacuum, lambda done: done[0]
        )
        if checkpoint is not None:
            checkpoint()
        if left == 0 or freed == 0 or not pacer.rest(lock_s):
            return
