"""Webhook checkpoints (``notify_checkpoints``): which process delivers a hook, and how far.

One process at a time delivers a hook, store-wide: every node and every ``serve`` or
``batch`` on one store may have the same ``[[notify]]`` configured, and two deliverers
would send each notification twice and out of order. The row's ``owner`` says who; another
process takes the hook only when that owner is gone, judged as recovery judges a session's
owner (``Liveness``: node leases, ``/proc`` on this host), so a ``kill -9`` is taken over
at once on one machine and after the lease across machines. The checkpoint moves only for
its owner: a process that lost the hook (taken over while it stood still) moves nothing.
"""

from __future__ import annotations

import time

from sqlalchemy import func, select, update

from store.dialect_sql import greatest
from store.queries.nodes import Liveness
from store.schema import events, notify_checkpoints
from store.writer import WriteContext


def take_hook(ctx: WriteContext, hook: str, owner: str) -> int | None:
    """Make ``owner`` the hook's deliverer: its checkpoint (the last event id accepted), or
    None while a live process holds it. A hook seen for the first time starts at the log's
    end: a hook added to a store with history is told what happens from now on."""
    conn = ctx.conn
    row = conn.execute(
        select(notify_checkpoints.c.last_event_id, notify_checkpoints.c.owner).where(
            notify_checkpoints.c.hook == hook
        )
    ).first()
    now = time.time()
    if row is None:
        start = conn.execute(select(func.coalesce(func.max(events.c.id), 0))).scalar_one()
        conn.execute(
            notify_checkpoints.insert().values(
                hook=hook, last_event_id=int(start), owner=owner, updated_at=now
            )
        )
        return int(start)
    if row.owner not in (None, owner) and Liveness(conn).alive(row.owner):
        return None
    conn.execute(
        update(notify_checkpoints)
        .where(notify_checkpoints.c.hook == hook)
        .values(owner=owner, updated_at=now)
    )
    return int(row.last_event_id)


def advance_hook(ctx: WriteContext, hook: str, owner: str, event_id: int) -> bool:
    """Move the checkpoint to ``event_id`` (never back); False when ``owner`` no longer
    holds the hook (another process took it over): the caller stops delivering."""
    done = ctx.conn.execute(
        update(notify_checkpoints)
        .where(notify_checkpoints.c.hook == hook, notify_checkpoints.c.owner == owner)
        .values(
            last_event_id=greatest(ctx.conn, notify_checkpoints.c.last_event_id, event_id),
            updated_at=time.time(),
        )
    )
    return done.rowcount == 1


def release_hook(ctx: WriteContext, hook: str, owner: str) -> None:
    """An orderly stop: another process may take the hook at once."""
    ctx.conn.execute(
        update(notify_checkpoints)
        .where(notify_checkpoints.c.hook == hook, notify_checkpoints.c.owner == owner)
        .values(owner=None, updated_at=time.time())
    )
