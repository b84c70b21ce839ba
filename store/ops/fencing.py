"""Ownership of a session by one live process, fenced by an epoch."""

from __future__ import annotations

import time
from collections.abc import Sequence

from sqlalchemy import Connection, update

from state_machines import (
    CommandState,
    SessionNotFound,
)
from state_machines.errors import (
    OwnedElsewhere,
    StaleEpoch,
)
from store import queries
from store.ops.recovery import recover_sessions
from store.queries.nodes import Liveness
from store.raw import raw_for
from store.schema import commands, sessions
from store.writer import WriteContext


def acquire(ctx: WriteContext, session_id: str, me: str) -> int:
    """Make ``me`` the session's owner; returns the fencing epoch to carry in its writes.

    Every acquire raises the epoch, also by the same owner (a new actor of this process after
    the previous one passivated): writes still in flight from any earlier holder, another
    process's or this one's, are refused (``StaleEpoch``), and so is its late ``release``.
    A live other owner: ``OwnedElsewhere``."""
    session = queries.get_session(ctx.conn, session_id)
    if session.owner != me:
        if session.owner is not None and Liveness(ctx.conn).alive(session.owner):
            raise OwnedElsewhere(session_id, session.owner)
        # Taken over before a sweep recovered it: what the dead owner left mid-turn is
        # recovered here, in the same transaction, so no turn starts on a session still
        # marked running (and no command stays running with nobody running it).
        recover_sessions(ctx, {session_id})
    epoch = session.epoch + 1
    ctx.conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id, sessions.c.epoch == session.epoch)
        .values(owner=me, epoch=epoch, updated_at=time.time())
    )
    return epoch


def release(ctx: WriteContext, session_id: str, me: str, epoch: int) -> None:
    """Give the session up, if ``me`` still holds it at ``epoch`` (a later holder's
    ownership is never cleared by an earlier one stopping late)."""
    ctx.conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id, sessions.c.owner == me, sessions.c.epoch == epoch)
        .values(owner=None, agent_process=None)  # its owner stopped the agent first
    )


def spare_attempts(
    ctx: WriteContext, session_id: str, epoch: int, command_ids: Sequence[str]
) -> None:
    """An orderly shutdown (Ctrl-C, close) stopped these running commands mid-turn: that is
    the user's choice, not the command failing, so it costs no attempt of the budget: each
    gets one more (``max_attempts + 1``). ``attempts`` still counts every claim, so the next
    start knows the prompt was sent (an agent that restored its conversation has it and is
    not sent it again). They stay ``running`` for the next open's recovery to requeue (or
    report) as after a crash; only crashes and kills use up the budget, so a command that
    kills its process every time still ends ``failed``."""
    check_epoch(ctx.conn, session_id, epoch)
    ctx.conn.execute(
        update(commands)
        .where(
            commands.c.id.in_(list(command_ids)),
            commands.c.session_id == session_id,
            commands.c.state == CommandState.RUNNING.value,
        )
        .values(max_attempts=commands.c.max_attempts + 1)
    )


def check_epoch(conn: Connection, session_id: str, epoch: int) -> None:
    """Refuse a write from an owner that lost the session (run first in its transaction)."""
    row = raw_for(conn).execute("SELECT epoch FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if row is None:
        raise SessionNotFound(session_id)
    if row[0] != epoch:
        raise StaleEpoch(session_id, epoch)
