"""Claiming unowned work for one node, with ``FOR UPDATE SKIP LOCKED`` (PostgreSQL).

Every node's discovery sees the same sessions with queued work, oldest first. Claimed one
by one through the actors' ``acquire``, nodes that discover at the same moment race for
the same first sessions and all but one lose (``OwnedElsewhere``). A claim takes up to the
node's free capacity in one transaction instead, skipping the rows another node's claim
holds locked at that moment, so nodes claiming together take different sessions.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from sqlalchemy import exists, or_, select, update

from state_machines import CommandState, SessionState
from store.dialect_sql import db_now, is_postgres
from store.ops.recovery import recover_sessions
from store.placement import allowed
from store.schema import commands, nodes, sessions
from store.writer import WriteContext

# Candidates read per claim beyond the free capacity: placement is judged in Python, so a
# few more rows than needed are looked at (only those taken are locked).
_EXTRA = 16


def claim_sessions(
    ctx: WriteContext, me: str, node_name: str, node_labels: Sequence[str], limit: int
) -> list[str]:
    """Up to ``limit`` sessions with work (queued commands, or still ``creating``) that have
    no owner or an owner whose lease has run out, whose placement allows this node, oldest
    first; each now owned by ``me`` with a raised epoch, and what a dead owner left mid-turn
    recovered in this same transaction (as ``acquire`` does). SQLite: none (one machine:
    discovery and ``acquire`` suffice)."""
    conn = ctx.conn
    if limit <= 0 or not is_postgres(conn):
        return []
    now = db_now(conn)
    owner_node = nodes.alias("owner_node")
    has_work = or_(
        sessions.c.state == SessionState.CREATING.value,
        exists().where(
            commands.c.session_id == sessions.c.id,
            commands.c.state == CommandState.QUEUED.value,
        ),
    )
    free = or_(
        sessions.c.owner.is_(None),
        owner_node.c.stopped_at.is_not(None),
        owner_node.c.lease_until < now,
    )
    # Which sessions this node may run (placement is judged in Python), unlocked; then the
    # first ``limit`` of them locked, skipping those another claim holds right now. Only
    # the rows taken are locked: a node never keeps another from work it leaves.
    candidates = conn.execute(
        select(sessions.c.id, sessions.c.placement)
        .select_from(sessions.outerjoin(owner_node, owner_node.c.id == sessions.c.owner))
        .where(sessions.c.state != SessionState.CLOSED.value, has_work, free)
        .order_by(sessions.c.created_at)
        .limit(limit + _EXTRA)
    ).all()
    allowed_ids = [r.id for r in candidates if allowed(r.placement, node_name, node_labels)]
    if not allowed_ids:
        return []
    taken = conn.execute(
        select(sessions.c.id, sessions.c.owner, sessions.c.epoch)
        .select_from(sessions.outerjoin(owner_node, owner_node.c.id == sessions.c.owner))
        .where(sessions.c.id.in_(allowed_ids), has_work, free)
        .order_by(sessions.c.created_at)
        .limit(limit)
        .with_for_update(of=sessions, skip_locked=True)
    ).all()
    if not taken:
        return []
    from_dead = {r.id for r in taken if r.owner is not None}
    if from_dead:
        recover_sessions(ctx, from_dead)
    stamp = time.time()
    for r in taken:
        conn.execute(
            update(sessions)
            .where(sessions.c.id == r.id, sessions.c.epoch == r.epoch)
            .values(owner=me, epoch=r.epoch + 1, updated_at=stamp)
        )
    return [r.id for r in taken]
