"""A session among its siblings (children of one parent): the cap on children running at
once, waking the siblings it held back, and the end of a ``mode=run`` child's one run."""

from __future__ import annotations

from collections.abc import Callable

from state_machines import SessionState
from store import Store, queries


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
    """A child finished a turn: a sibling held back by max_running_children may go."""
    for sibling in store.list_sessions(parent_id=parent_id, limit=10_000):
        if sibling.id != session_id and sibling.state is not SessionState.CLOSED:
            notify(sibling.id)
