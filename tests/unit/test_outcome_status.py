"""One status vocabulary for finished runs: announce, subagent_result (Outcome.status) and a
batch's results file derive it from the same function."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from control_plane import Outcome, OutcomeStatus
from state_machines import CommandState, outcome_status
from state_machines.outcome_status import STATUS_FROM_RESULT
from store import CommandKind, CommandRecord
from store.ops.announce import status_of

CASES: list[tuple[CommandState, dict[str, Any] | None, OutcomeStatus]] = [
    (CommandState.COMPLETED, {"stopReason": "end_turn"}, OutcomeStatus.OK),
    (CommandState.COMPLETED, {"stopReason": "max_tokens"}, OutcomeStatus.OK),
    (CommandState.FAILED, None, OutcomeStatus.FAILED),
    (CommandState.FAILED, {"timedOut": True, "stopReason": "cancelled"}, OutcomeStatus.TIMEOUT),
    (CommandState.CANCELLED, {"stopReason": "cancelled"}, OutcomeStatus.CANCELLED),
    (CommandState.INTERRUPTED, None, OutcomeStatus.INTERRUPTED),
]


def _command(state: CommandState, result: dict[str, Any] | None) -> CommandRecord:
    return CommandRecord(
        id="c1",
        session_id="s1",
        seq=1,
        kind=CommandKind.PROMPT,
        payload_json="{}",
        idempotency_key=None,
        state=state,
        attempts=1,
        max_attempts=3,
        result_json=None if result is None else json.dumps(result),
        error=None if state is CommandState.COMPLETED else "why",
        created_ts=time.time(),
        started_ts=None,
        finished_ts=None,
    )


@pytest.mark.parametrize(("state", "result", "expected"), CASES)
def test_announce_and_outcome_give_the_same_word(
    state: CommandState, result: dict[str, Any] | None, expected: OutcomeStatus
) -> None:
    command = _command(state, result)
    assert outcome_status(state, result) is expected
    assert status_of(command) is expected  # what an announce says
    assert Outcome.of(command).status is expected  # what subagent_result and hosts see


def test_every_status_word_is_reachable_and_the_old_error_word_is_gone() -> None:
    assert {expected for _, _, expected in CASES} == set(OutcomeStatus)
    assert "error" not in {s.value for s in OutcomeStatus}  # announce used to say "error"


@pytest.mark.parametrize("state", [CommandState.QUEUED, CommandState.RUNNING])
def test_a_run_that_is_not_final_has_no_status(state: CommandState) -> None:
    assert outcome_status(state, None) is None
    with pytest.raises(ValueError, match="not final"):
        status_of(_command(state, None))


@pytest.mark.parametrize("state", list(CommandState))
def test_only_the_states_named_read_the_result(state: CommandState) -> None:
    """Metrics parse a finished command's result only for ``STATUS_FROM_RESULT`` (on the
    writer thread, per prompt): every other state's status must not depend on it."""
    results: list[dict[str, Any] | None] = [None, {}, {"timedOut": True}, {"timedOut": False}]
    statuses = {outcome_status(state, result) for result in results}
    assert (len(statuses) > 1) == (state in STATUS_FROM_RESULT)
