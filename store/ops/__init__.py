"""Every write transaction of the control plane, by concern. Each operation runs inside one
transaction of the group-commit writer (``Store.write(lambda ctx: ops.X(ctx, ...))``); reads
are in ``store/queries/``. Nothing outside ``store/`` writes SQL.

- ``sessions``: spawn (binding and first prompt in the same transaction), bind, close, the
  orphan sweep, the agent capabilities cache;
- ``commands``: enqueue, claim, complete, fail, interrupt, cancel;
- ``events``: appends and delivery checkpoints;
- ``fencing``: ownership by one live process and its epoch;
- ``recovery``: work a dead owner left in flight;
- ``turns``: the session actor's turn lifecycle (claim, outcome, agent start and exit);
- ``announce``: a finished subagent run announced to its parent, exactly once;
- ``budgets``: token usage counted, budgets checked, stopped sessions refused;
- ``tokens``: access tokens of the network front end created and revoked;
- ``permissions``: network clients' permission requests opened and decided once.
"""

from __future__ import annotations

from store.ops._shared import DEFAULT_MAX_ATTEMPTS, new_id, transition_command, transition_session
from store.ops.commands import (
    cancel,
    cancel_command,
    cancel_queued,
    cancel_tree,
    claim_next,
    complete,
    enqueue,
    fail,
    find_by_key,
    interrupt_command,
    submit_prompt,
)
from store.ops.events import advance_checkpoint, append_events, append_frames, insert_events
from store.ops.fencing import acquire, check_epoch, release, spare_attempts
from store.ops.recovery import interrupted_turns_policy, recover, recover_sessions
from store.ops.sessions import (
    bind,
    close_orphans,
    close_session,
    close_sessions,
    record_agent_capabilities,
    spawn,
)

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "acquire",
    "advance_checkpoint",
    "append_events",
    "append_frames",
    "bind",
    "cancel",
    "cancel_command",
    "cancel_queued",
    "cancel_tree",
    "check_epoch",
    "claim_next",
    "close_orphans",
    "close_session",
    "close_sessions",
    "complete",
    "enqueue",
    "fail",
    "find_by_key",
    "insert_events",
    "interrupt_command",
    "interrupted_turns_policy",
    "new_id",
    "record_agent_capabilities",
    "recover",
    "recover_sessions",
    "release",
    "spare_attempts",
    "spawn",
    "submit_prompt",
    "transition_command",
    "transition_session",
]
