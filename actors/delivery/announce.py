"""Announcing a child session's run outcomes to its parent, exactly once.

A child spawned with ``announce=True`` has a binding of kind ``parent``. A turn's end
announces itself in the transaction that records it (``actors/session/family.py``,
``announcing``); the sink is for every other way a run ends and for a turn whose announce
failed. Its projector hands the child's events to an ``AnnounceSink``. When they show that a
run ended (``turn_ended``,
``turn_failed``, ``interrupted``, ``agent_start_failed``, ``closed``), the sink writes, in one
transaction, for every finished prompt of the child not announced yet: an ``announce`` event
in the parent's log (a ``custom_message`` in its transcript) and, by default, a follow-up
prompt for the parent whose idempotency key is derived from the child's run. A crash after
that commit but before the checkpoint moved re-delivers the events; the announce is found
and not repeated. A parent that is closed gets nothing (the child's result stays readable).

The status comes from the run's final state, never from the model's text:
completed -> ok, cancelled -> cancelled, failed by a turn timeout -> timeout, failed -> error.
"""

from __future__ import annotations

from collections.abc import Sequence

from state_machines.event_kinds import EventKind
from store import EventRecord, Store
from store.faults import fault_point
from store.ops.announce import announce_finished_runs, unannounced_runs

TRIGGERS = frozenset(
    {
        EventKind.TURN_ENDED,
        EventKind.TURN_FAILED,
        EventKind.INTERRUPTED,
        EventKind.TURN_INTERRUPTED,
        EventKind.AGENT_START_FAILED,
        EventKind.CLOSED,
    }
)


class AnnounceSink:
    def __init__(self, store: Store, child_id: str, parent_id: str, as_prompt: bool) -> None:
        self._store = store
        self.child_id = child_id
        self.parent_id = parent_id
        self.as_prompt = as_prompt
        self.parents_notified: list[str] = []  # parents that got new work (to wake them)

    def deliver(self, batch: Sequence[EventRecord]) -> None:
        if not any(e.kind in TRIGGERS for e in batch):
            return
        # A turn's end announced itself in its own transaction (actors/session/family.py):
        # a read finds nothing left, and no write is queued behind the writer for nothing.
        if not self._store.read(lambda conn: unannounced_runs(conn, self.child_id, self.parent_id)):
            return
        count = self._store.write(
            lambda ctx: announce_finished_runs(ctx, self.child_id, self.parent_id, self.as_prompt)
        )
        fault_point("announce.after_commit")
        if count and self.as_prompt:
            self.parents_notified.append(self.parent_id)

    def close(self) -> None:
        return None
