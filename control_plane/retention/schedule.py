"""The ``[retention]`` schedule: ``acpctl serve`` and ``acpctl batch`` run the same gc as
``acpctl gc`` in a background thread, every ``interval``, while the process lives.

The first pass comes ``min(interval, FIRST_AFTER_S)`` after the start (a short batch gets
one too, and the start-up's own work, recovery and agents starting, goes first). A pass
that fails is logged and the next one comes on time: retention never stops the process.
Stopping (the control plane closing) interrupts a pass between two of its transactions;
the next pass, in this process or another, finishes what it left.
"""

from __future__ import annotations

import logging
import threading

from control_plane.retention.pacing import Pacer
from control_plane.retention.policy import RetentionRefused, ScheduledGc, checked_archive_dir
from control_plane.retention.report import GcReport
from protocol.os_thread_name import name_this_thread
from store import Store

log = logging.getLogger(__name__)
# What retention deletes is said by default (acpctl logs warnings and up otherwise): data
# that goes for good must leave a trace in the process's log.
log.setLevel(logging.INFO)

FIRST_AFTER_S = 30.0


class RetentionSchedule:
    def __init__(self, store: Store, scheduled: ScheduledGc) -> None:
        self.store = store
        self.scheduled = scheduled
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="retention", daemon=True)
        self.passes = 0  # passes finished (tests, status)
        self.last: GcReport | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop, interrupting a pass between two transactions; returns once it stopped."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self) -> None:
        name_this_thread()
        wait = min(self.scheduled.interval_s, FIRST_AFTER_S)
        while not self._stop.wait(wait):
            self.run_once()
            wait = self.scheduled.interval_s

    def run_once(self) -> GcReport | None:
        from control_plane.retention.run import run_gc

        policy = self.scheduled.policy
        try:
            if policy.archive_dir is not None:
                # Checked at each pass: a directory that comes back (a remounted volume)
                # is used again, and none is deleted unarchived meanwhile.
                checked_archive_dir(policy.archive_dir)
            report = run_gc(self.store, policy, Pacer(stop=self._stop))
        except RetentionRefused as exc:
            log.error("retention: nothing deleted: %s", exc)
            return None
        except Exception:  # never the process's end: the next pass comes on time
            log.exception("retention: the gc pass failed")
            return None
        self.passes += 1
        self.last = report
        _log(report)
        return report


def _log(report: GcReport) -> None:
    if not (report.deleted or report.failed):
        log.debug("retention: %s", report.summary())
        return
    log.info("retention: %s", report.summary())
    for tree in report.deleted:
        where = f" (archive {tree.archive['path']})" if tree.archive else ""
        log.info(
            "retention: deleted tree %s: %d sessions, %d events%s",
            tree.root,
            len(tree.sessions),
            tree.events,
            where,
        )
    for kept in report.kept:  # the same ones each pass, mostly: in the summary's count
        log.debug("retention: kept tree %s: %s: %s", kept.root, kept.reason, kept.detail)
    for failed in report.failed:
        log.warning("retention: tree %s not deleted: %s", failed.root, failed.error)
