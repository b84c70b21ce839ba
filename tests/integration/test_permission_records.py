"""The store's side of permission requests (store/ops/permissions.py): a request and its
settlement each written with an event in the session's log, in the row's own transaction;
the first answer wins by compare-and-set; a closed session's log stays final."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane import ControlPlane
from state_machines import SessionClosed
from state_machines.event_kinds import EventKind
from tests.support.cp_harness import noop_agent

TOOL_CALL = {"toolCallId": "call-1", "title": "Edit main.py", "rawInput": {"path": "main.py"}}
OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]
KINDS = (EventKind.PERMISSION_REQUESTED.value, EventKind.PERMISSION_SETTLED.value)


def _permission_events(cp: ControlPlane, sid: str) -> list[tuple[str, dict[str, object]]]:
    return [(e.kind, e.payload) for e in cp.events_of_kinds(sid, KINDS)]


def test_a_request_carries_itself_and_the_first_answer_wins_on_record(
    tmp_path: Path, db: str
) -> None:
    with ControlPlane.open(db, run_sessions=False) as cp:
        sid = cp.spawn(noop_agent(), tmp_path).session.id
        cp.open_permission_request("acpctl-permission-1", sid, TOOL_CALL, OPTIONS)
        ((record, params),) = cp.pending_permissions([sid])
        assert record.id == "acpctl-permission-1" and record.tool_call_id == "call-1"
        assert params == {"toolCall": TOOL_CALL, "options": OPTIONS}
        assert cp.decide_permission("acpctl-permission-1", "allow", "phone") is True
        assert cp.decide_permission("acpctl-permission-1", "reject", "laptop") is False
        assert cp.withdraw_permission("acpctl-permission-1") is False
        assert cp.pending_permissions([sid]) == []
        (after,) = cp.permission_requests(["acpctl-permission-1", "acpctl-permission-none"])
        assert (after.state, after.option_id, after.decided_by) == ("answered", "allow", "phone")
        assert _permission_events(cp, sid) == [
            (
                "permission_requested",
                {
                    "requestId": "acpctl-permission-1",
                    "toolCallId": "call-1",
                    "title": "Edit main.py",
                    "toolCall": TOOL_CALL,
                    "options": OPTIONS,
                },
            ),
            (
                "permission_settled",
                {
                    "requestId": "acpctl-permission-1",
                    "state": "answered",
                    "optionId": "allow",
                    "decidedBy": "phone",
                },
            ),
        ]


def test_a_withdrawal_is_said_in_the_log_except_in_a_closed_sessions(
    tmp_path: Path, db: str
) -> None:
    with ControlPlane.open(db, run_sessions=False) as cp:
        sid = cp.spawn(noop_agent(), tmp_path).session.id
        for n in (1, 2, 3):
            cp.open_permission_request(f"acpctl-permission-{n}", sid, TOOL_CALL, OPTIONS)
        assert cp.withdraw_permission("acpctl-permission-1") is True
        assert _permission_events(cp, sid)[-1] == (
            "permission_settled",
            {"requestId": "acpctl-permission-1", "state": "withdrawn"},
        )
        cp.close_session(sid)
        seen = len(_permission_events(cp, sid))
        # Closed: an answer is refused, typed, and nothing is recorded; a withdrawal settles
        # the row without touching the final log.
        with pytest.raises(SessionClosed):
            cp.decide_permission("acpctl-permission-2", "allow", "phone")
        assert cp.permission_request("acpctl-permission-2").state == "pending"  # type: ignore[union-attr]
        assert cp.withdraw_permission("acpctl-permission-3") is True
        assert cp.permission_request("acpctl-permission-3").state == "withdrawn"  # type: ignore[union-attr]
        assert len(_permission_events(cp, sid)) == seen


def test_a_request_of_a_session_whose_owner_died_is_withdrawn_by_its_recovery(
    tmp_path: Path, db: str
) -> None:
    """The agent that asked died with its owner: recovery withdraws what it left pending (in
    the log too), so no node keeps putting it to its clients; other sessions' stay."""
    from store import Store, ops

    with ControlPlane.open(db, run_sessions=False) as cp:
        dead = cp.spawn(noop_agent(), tmp_path).session.id
        alive = cp.spawn(noop_agent(), tmp_path).session.id
        cp.open_permission_request("acpctl-permission-d", dead, TOOL_CALL, OPTIONS)
        cp.open_permission_request("acpctl-permission-a", alive, TOOL_CALL, OPTIONS)
    with Store.open(db) as store:
        store.write(lambda ctx: ops.recover_sessions(ctx, {dead}))
    with ControlPlane.open(db, run_sessions=False) as cp:
        assert cp.permission_request("acpctl-permission-d").state == "withdrawn"  # type: ignore[union-attr]
        assert cp.permission_request("acpctl-permission-a").state == "pending"  # type: ignore[union-attr]
        assert _permission_events(cp, dead)[-1] == (
            "permission_settled",
            {"requestId": "acpctl-permission-d", "state": "withdrawn"},
        )
        assert [r.id for r, _ in cp.pending_permissions([dead, alive])] == ["acpctl-permission-a"]
