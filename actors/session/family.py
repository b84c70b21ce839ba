"""A session among its siblings (children of one parent): the cap on children running at
once, waking the siblings it held back, the end of a ``mode=run`` child's one run, and its
turn's end announced to the parent in the same transaction."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from store import Store, queries
from store.faults import fault_point
from store.ops.announce import announce_turn
from store.writer import WriteContext

log = logging.getLogger(__name__)

T = TypeVar("T")


def run_is_over(store: Store, session_id: str) -> bool:
    """A ``mode=run`` child whose one prompt has ended (interrupted, not sent again)."""
    commands = store.commands_of(session_id)
    return bool(commands) and all(c.is_final for c in commands)


def children_cap_full(store: Store, session_id: str, cap: int) -> bool:
    """Checked before starting an agent, so a child held back by max_running_children holds
    no agent process either (the claim re-checks it inside its transaction)."""
    return store.read_raw(lambda raw: queries.siblings_running(raw, session_id)) >= cap


def wake_siblings(
    store: Store, session_id: str, parent_id: str, notify: Callable[[str], None]
) -> None:
    """A child finished a turn: a sibling held back by max_running_children may go. Only
    siblings with queued work that could start a turn are told (one read of their ids): a
    cap holds back only a turn, and a turn comes only from a queued command; a running (or
    cancelling) sibling wakes the others itself when its turn ends; a closed one never runs
    again."""
    waiting = store.read_raw(
        lambda raw: queries.siblings_with_queued_work(raw, session_id, parent_id)
    )
    for sibling_id in waiting:
        notify(sibling_id)


def announcing(
    write: Callable[[WriteContext], T],
    session_id: str,
    command_ids: tuple[str, ...],
    as_prompt: bool,
    notify: Callable[[str], None],
) -> tuple[Callable[[WriteContext], T], Callable[[], None]]:
    """A child's turn-ending ``write`` that also announces the turn to the parent (when the
    child announces: ``announce_turn``), in one transaction: the announce commits with the
    turn's end, not after a delivery and a commit of its own. The second function, called
    after the commit, wakes a parent that got a follow-up prompt. The announce runs in a
    savepoint: if it fails, the turn's end still commits and the delivery's announce sink
    (actors/delivery/announce.py) announces the run later."""
    announced: list[tuple[str, int]] = []

    def both(ctx: WriteContext) -> T:
        announced.clear()  # a write may run again (a group commit retried): its last run counts
        result = write(ctx)
        ok, value = ctx.isolated(lambda c: announce_turn(c, session_id, command_ids, as_prompt))
        if not ok:
            log.warning("session %s: announcing with the turn's end failed: %s", session_id, value)
        elif isinstance(value, tuple):
            announced.append(value)
        return result

    def after_commit() -> None:
        for parent_id, count in announced:
            if count:
                fault_point("announce.after_commit")
                if as_prompt:
                    notify(parent_id)

    return both, after_commit
