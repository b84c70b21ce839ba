"""One gc pass: plan, then per tree archive, claim and delete; then give space back.

The plan is read on a reader (``queries.retention.judge_tree``): trees an earlier gc
claimed and did not finish come first (their deletion goes on, not archived again: their
archive was verified before any of it was deleted), then trees whose root is old enough in
a chosen state. Each tree is then, in turn:

1. archived (when an archive directory is set) from the store as it is: nothing is
   written to the store yet, so a failed archive leaves the tree as it was;
2. claimed in one write transaction that judges it again and checks that nothing changed
   since the archive was read (store/ops/retention.py: ``claim_tree``);
3. deleted in short paced transactions (``deletion``).

One pass at a time in a process (a lock): the schedule and a caller never interleave.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

from control_plane.retention import deletion, space
from control_plane.retention.archive import (
    ArchiveError,
    ArchiveStopped,
    remove_archive,
    sweep_stale,
    write_archive,
)
from control_plane.retention.pacing import Pacer
from control_plane.retention.policy import RetentionPolicy
from control_plane.retention.report import GcReport, TreeDone, TreeFailed, TreeKept
from state_machines import ControlPlaneError
from store import Store
from store.ops import retention as retention_ops
from store.ownership import this_owner
from store.queries import retention as retention_queries
from store.queries.retention import Kept, RetentionRule, TreeVerdict

_ONE_AT_A_TIME = threading.Lock()


def run_gc(store: Store, policy: RetentionPolicy, pacer: Pacer | None = None) -> GcReport:
    """Run one pass of ``policy`` on ``store``; what it did. Stops between two transactions
    once ``pacer.stop`` is set (what it left half-done is finished by the next pass)."""
    pacer = pacer or Pacer()
    with _ONE_AT_A_TIME:
        rule = policy.rule()
        report = GcReport(
            store=store.path,
            dry_run=policy.dry_run,
            older_than=policy.older_than,
            states=list(policy.states),
            cutoff=datetime.fromtimestamp(rule.cutoff, UTC).isoformat(timespec="seconds"),
            archive_dir=None if policy.archive_dir is None else str(policy.archive_dir),
        )
        report.locks = pacer.locks
        report.space = space.start_report(store)
        me = this_owner()
        if policy.archive_dir is not None and not policy.dry_run:
            sweep_stale(policy.archive_dir)  # what a gc killed while archiving left
        with space.wal_keeper(store) as checkpoint:
            for verdict in plan(store, rule, me):
                if pacer.stop.is_set():
                    break
                if verdict.kept is not None:
                    report.kept.append(_kept(verdict))
                elif policy.dry_run:
                    report.deleted.append(_done(verdict, None, verdict.events, finished=True))
                else:
                    _one_tree(store, policy, rule, me, verdict, pacer, checkpoint, report)
            if report.deleted and not policy.dry_run and not pacer.stop.is_set():
                space.give_back(store, report.space, pacer, checkpoint)
        return report


def plan(store: Store, rule: RetentionRule, me: str) -> list[TreeVerdict]:
    """Every tree to finish or to consider, judged on one reader snapshot each: the claimed
    ones first, then the candidates."""
    marked = store.read(retention_queries.marked_roots)
    candidates = store.read(lambda c: retention_queries.candidate_roots(c, rule))
    chosen = set(candidates)
    verdicts = []
    for root in dict.fromkeys([*marked, *candidates]):  # in order, each once
        verdict = store.read(partial(retention_queries.judge_tree, root_id=root, rule=rule, me=me))
        if verdict is None:
            continue
        claimed = verdict.resumed or verdict.kept == Kept.CLAIMED
        if claimed or root in chosen:  # not a key of a caller's that looked like a claim
            verdicts.append(verdict)
    return verdicts


def _one_tree(
    store: Store,
    policy: RetentionPolicy,
    rule: RetentionRule,
    me: str,
    planned: TreeVerdict,
    pacer: Pacer,
    checkpoint: Callable[[], None] | None,
    report: GcReport,
) -> None:
    archive = None
    try:
        if policy.archive_dir is not None and not planned.resumed:
            archive = write_archive(store, planned, policy.archive_dir, pacer.stop)
        expected = None if archive is None else {s.id: s.counters for s in planned.sessions}
        recorded = None if archive is None else archive.to_json()
        claimed = store.write(
            lambda ctx: retention_ops.claim_tree(ctx, planned.root, rule, me, expected, recorded)
        )
    except ArchiveStopped:
        return  # the process is closing: the tree is as it was, for the next pass
    except ArchiveError as exc:
        report.failed.append(TreeFailed(planned.root, str(exc)))
        return
    except ControlPlaneError as exc:  # a read or the claim refused: nothing was deleted
        if archive is not None:
            remove_archive(archive.path)
        report.failed.append(TreeFailed(planned.root, f"not claimed: {exc}"))
        return
    if claimed is None or claimed.kept is not None:
        # Gone meanwhile, or no longer deletable: an archive made for it describes nothing
        # that is being deleted, and would be overwritten by the next one anyway.
        if archive is not None:
            remove_archive(archive.path)
        if claimed is not None:
            report.kept.append(_kept(claimed))
        return
    if claimed.resumed:
        recorded = (claimed.sessions[0].mark or {}).get("archive")
    children_first = [s.id for s in reversed(claimed.sessions)]
    try:
        stats = deletion.delete_tree(store, children_first, pacer, checkpoint)
    except ControlPlaneError as exc:  # claimed and maybe half-deleted: the next gc ends it
        report.failed.append(TreeFailed(planned.root, f"deleting the tree failed: {exc}"))
        return
    report.deleted.append(_done(claimed, recorded, stats.events, stats.finished))


def _done(
    verdict: TreeVerdict, archive: dict[str, object] | None, events: int, finished: bool
) -> TreeDone:
    return TreeDone(
        root=verdict.root,
        sessions=verdict.ids,
        events=events,
        archive=archive,
        resumed=verdict.resumed,
        forced=bool(verdict.undelivered),
        finished=finished,
    )


def _kept(verdict: TreeVerdict) -> TreeKept:
    return TreeKept(
        root=verdict.root,
        sessions=len(verdict.sessions),
        reason=verdict.kept or "",
        detail=verdict.detail,
        undelivered=[
            {
                "binding": u.binding_id,
                "session": u.session_id,
                "sink": u.sink_kind,
                "target": u.target,
                "delivered": u.delivered_seq,
                "last": u.last_seq,
            }
            for u in verdict.undelivered
        ],
    )
