"""Claim offers (actors/session/claim_offer.py): a prompt to a live idle session is claimed in
the transaction that queues it; a claim its actor cannot start goes back to the queue unsent.

The store's two operations on both backends, then the whole path with the example agent as a
real subprocess: the offer taken, and the races between a claim's commit and the actor that
should start it (its agent killed, the process shut down, the session closed)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from actors.session.claimed_turns import ClaimedTurns
from actors.telemetry import CLAIM_OFFERS
from control_plane import CommandState, ControlPlane, SessionState
from state_machines import COMMAND_MACHINE, BudgetExceeded, SessionClosed, SessionNotFound
from store import CommandKind, CommandRecord, Store, ops
from store.ops import budgets, turns
from store.ownership import this_owner
from store.usage import BudgetStop
from tests.conftest import AGENT, eventually
from tests.support.cp_harness import example_agent, invocations, open_cp

PROMPT = [{"type": "text", "text": "hello"}]


# -- the store's operations ----------------------------------------------------------------


def _idle(store: Store) -> tuple[str, int]:
    """A session owned here with its agent started: (session id, epoch)."""
    sid = store.spawn(AGENT, "/work").session.id
    epoch = store.write(lambda ctx: ops.acquire(ctx, sid, this_owner()))
    store.write(lambda ctx: turns.agent_started(ctx, sid, epoch, "acp-1", "new", {}))
    return sid, epoch


def _queue(store: Store, sid: str, text: str = "hello") -> CommandRecord:
    payload = {"content": [{"type": "text", "text": text}]}
    command, _ = store.write(lambda ctx: ops.submit_prompt(ctx, sid, payload, None, None))
    return command


def _claim(store: Store, sid: str, command_id: str, epoch: int) -> list[CommandRecord]:
    return store.write(lambda ctx: turns.claim_submitted(ctx, sid, command_id, epoch, False))


# A claim offer is each backend's conditional update: both backends by default.
@pytest.mark.backend_specific
def test_the_head_prompt_of_an_idle_session_is_claimed_at_its_owners_epoch(store: Store) -> None:
    sid, epoch = _idle(store)
    command = _queue(store, sid)
    claimed = _claim(store, sid, command.id, epoch)
    assert [c.id for c in claimed] == [command.id]
    assert store.get_command(command.id).state is CommandState.RUNNING
    assert store.get_command(command.id).attempts == 1
    assert store.get_session(sid).state is SessionState.RUNNING
    assert store.events(sid)[-1].kind == "prompt"


@pytest.mark.backend_specific
def test_no_claim_at_another_epoch_behind_another_command_or_while_running(store: Store) -> None:
    sid, epoch = _idle(store)
    first = _queue(store, sid, "first")
    second = _queue(store, sid, "second")
    assert _claim(store, sid, first.id, epoch + 1) == []  # not the owner's epoch
    assert _claim(store, sid, second.id, epoch) == []  # not the head of the queue
    assert store.get_command(second.id).state is CommandState.QUEUED
    assert [c.id for c in _claim(store, sid, first.id, epoch)] == [first.id]
    assert _claim(store, sid, second.id, epoch) == []  # the session is running
    assert store.get_command(second.id).state is CommandState.QUEUED
    assert store.get_command(second.id).attempts == 0


@pytest.mark.backend_specific
def test_an_unclaimed_prompt_is_queued_again_with_its_attempt_given_back(store: Store) -> None:
    sid, epoch = _idle(store)
    command = _queue(store, sid)
    claimed = _claim(store, sid, command.id, epoch)
    store.write(lambda ctx: turns.unclaim(ctx, sid, epoch, claimed, "the agent died"))
    again = store.get_command(command.id)
    assert (again.state, again.attempts) == (CommandState.QUEUED, 0)
    assert store.get_session(sid).state is SessionState.IDLE
    interrupted = store.events(sid)[-1]
    assert interrupted.kind == "interrupted"
    assert interrupted.payload["willRetry"] is True
    assert "the agent died" in interrupted.payload["reason"]
    # The actor's own claim takes it next, as its first attempt.
    retaken = store.write(lambda ctx: turns.begin_next(ctx, sid, epoch, False))
    assert [(c.id, c.attempts) for c in retaken] == [(command.id, 1)]


@pytest.mark.backend_specific
def test_an_unclaimed_prompt_of_a_cancelled_turn_is_cancelled(store: Store) -> None:
    sid, epoch = _idle(store)
    command = _queue(store, sid)
    claimed = _claim(store, sid, command.id, epoch)
    store.write(lambda ctx: ops.cancel(ctx, sid))
    assert store.get_session(sid).state is SessionState.CANCELLING
    store.write(lambda ctx: turns.unclaim(ctx, sid, epoch, claimed, "stopping"))
    assert store.get_command(command.id).state is CommandState.CANCELLED
    assert store.get_session(sid).state is SessionState.IDLE
    ended = store.events(sid)[-1]  # a turn cancelled at once: no retry, no interruption
    assert (ended.kind, ended.payload["stopReason"]) == ("turn_ended", "cancelled")


@pytest.mark.backend_specific
def test_a_refused_prompt_takes_no_seq_and_writes_nothing(store: Store) -> None:
    """A prompt's seq and its terms are one statement: a prompt refused after it (a budget's
    stop) raises its typed error, its rollback gives the seq back, and the session's next
    command takes the seq after the last one queued. Closed and unknown sessions are
    refused as such."""
    sid, _ = _idle(store)
    first = _queue(store, sid, "first")
    store.write(lambda ctx: budgets.stop(ctx, [sid], BudgetStop("session tokens", 10.0, 12.0)))
    logged = len(store.events(sid))
    with pytest.raises(BudgetExceeded) as refused:
        _queue(store, sid, "refused")
    assert refused.value.budget == "session tokens"
    assert len(store.events(sid)) == logged
    mode = store.enqueue(sid, CommandKind.SET_MODE, {"modeId": "plan"})
    assert [c.seq for c in store.commands_of(sid)] == [first.seq, first.seq + 1]
    assert mode.command.seq == first.seq + 1
    with pytest.raises(SessionNotFound):
        _queue(store, "no-such-session")
    closing, _ = _idle(store)
    store.close_session(closing)
    with pytest.raises(SessionClosed):
        _queue(store, closing, "after close")
    assert store.commands_of(closing) == []


# -- the whole path, with the example agent ------------------------------------------------


def _claims(outcome: str) -> float:
    return float(CLAIM_OFFERS.labels(outcome)._value.get())


def _offering(cp: ControlPlane, sid: str) -> None:
    """Wait for the session's actor to offer: its turn's outcome commits (what ``wait``
    waits for) a moment before the actor is done with the turn and idle."""
    offers = cp._supervisor._deps.offers
    eventually(lambda: offers.offered(sid), what="the session's claim offer")


def _idle_session(cp: ControlPlane, tmp: Path) -> str:
    """A session whose first turn is over: its actor is idle with its agent up, offering."""
    spawned = cp.spawn(example_agent(tmp), tmp, "#chunks=2 warm")
    assert spawned.command is not None
    assert cp.wait(spawned.command.id, 60).ok
    _offering(cp, spawned.session.id)
    return spawned.session.id


def test_prompts_to_an_idle_session_are_claimed_in_their_enqueue(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        sid = _idle_session(cp, tmp_path)
        before = _claims("claimed")
        ids = []
        for i in range(5):
            _offering(cp, sid)
            command = cp.prompt(sid, f"#chunks=3 p{i}")
            ids.append(command.id)
            assert cp.wait(command.id, 60).ok
        # Each prompt found the actor idle (the previous one waited for): all five claimed
        # with their enqueue, each run once, as its first attempt.
        assert _claims("claimed") - before == 5
        assert [cp.command(i).attempts for i in ids] == [1] * 5
        assert [i["message"] for i in invocations(tmp_path)][1:] == [
            f"#chunks=3 p{i}" for i in range(5)
        ]
        kinds = [e.kind for e in cp.events(sid) if e.kind in ("prompt", "turn_ended")]
        assert kinds == ["prompt", "turn_ended"] * 6


class Hold:
    """Holds the next actor that settles an offer of its own, until ``release``: the claim
    has committed and the actor has not started its turn yet (the race under test)."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.holding = threading.Event()
        self.released = threading.Event()
        self.actor: ClaimedTurns | None = None

    def settle(self, actor: ClaimedTurns, settle: Callable[[ClaimedTurns], bool]) -> bool:
        if self.armed.is_set() and actor.offer.has_offer:
            self.armed.clear()
            self.actor = actor
            self.holding.set()
            self.released.wait(60)
        return settle(actor)


@pytest.fixture
def hold(monkeypatch: pytest.MonkeyPatch) -> Iterator[Hold]:
    held = Hold()
    settle = ClaimedTurns._settle_offer
    monkeypatch.setattr(ClaimedTurns, "_settle_offer", lambda self: held.settle(self, settle))
    yield held
    held.released.set()


def _agent_pid(cp: ControlPlane, sid: str) -> int:
    return int([e for e in cp.events(sid) if e.kind == "agent_started"][-1].payload["pid"])


def _claimed_while_held(cp: ControlPlane, sid: str, hold: Hold, text: str) -> CommandRecord:
    """Queue ``text`` so that its write claims it for the idle actor, and hold the actor."""
    before = _claims("claimed")
    hold.armed.set()
    command = cp.prompt(sid, text)
    assert hold.holding.wait(30), "the actor was not told of the claim"
    assert _claims("claimed") - before == 1
    assert cp.command(command.id).state is CommandState.RUNNING
    return command


def _sent(tmp: Path, text: str) -> int:
    return [i["message"] for i in invocations(tmp)].count(text)


def test_a_claim_whose_agent_died_before_its_turn_started_runs_once_unsent_before(
    tmp_path: Path, db: str, hold: Hold
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        sid = _idle_session(cp, tmp_path)
        pid = _agent_pid(cp, sid)
        command = _claimed_while_held(cp, sid, hold, "#chunks=2 after the kill")
        returned = _claims("returned")
        os.kill(pid, signal.SIGKILL)
        actor = hold.actor
        assert actor is not None
        eventually(lambda: actor.conn is None or not actor.conn.alive, what="agent seen dead")
        hold.released.set()
        outcome = cp.wait(command.id, 60)
        assert outcome.ok, outcome
        assert _claims("returned") - returned == 1
        assert cp.command(command.id).attempts == 1  # the returned claim cost no attempt
        assert _sent(tmp_path, "#chunks=2 after the kill") == 1
        notes = [e.payload for e in cp.events(sid) if e.kind == "interrupted"]
        assert [(n["commandId"], n["willRetry"]) for n in notes] == [(command.id, True)]
        assert _agent_pid(cp, sid) != pid  # a new agent ran it


def test_a_claim_the_shutdown_caught_before_its_turn_started_runs_after_the_next_open(
    tmp_path: Path, db: str, hold: Hold
) -> None:
    cp = open_cp(tmp_path, db=db)
    try:
        sid = _idle_session(cp, tmp_path)
        command = _claimed_while_held(cp, sid, hold, "#chunks=2 across a restart")
        closing = threading.Thread(target=cp.close)
        closing.start()
        eventually(lambda: cp._supervisor._stopping.is_set(), what="the shutdown begun")
        hold.released.set()
        closing.join(60)
        assert not closing.is_alive()
    finally:
        hold.released.set()
        cp.close()
    with contextlib.closing(open_cp(tmp_path, db=db)) as cp:
        left = cp.command(command.id)
        assert (left.state, left.attempts) == (CommandState.QUEUED, 0)
        assert cp.get(sid).state is not SessionState.RUNNING
        outcome = cp.wait(command.id, 60)
        assert outcome.ok, outcome
        assert cp.command(command.id).attempts == 1
        assert _sent(tmp_path, "#chunks=2 across a restart") == 1


def test_a_claim_its_session_closed_over_ends_and_leaves_nothing_running(
    tmp_path: Path, db: str, hold: Hold
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        sid = _idle_session(cp, tmp_path)
        command = _claimed_while_held(cp, sid, hold, "#chunks=50 #delay=20 closed over")
        closing = threading.Thread(target=cp.close_session, args=(sid, "by the test"))
        closing.start()
        hold.released.set()
        closing.join(60)
        assert cp.get(sid).state is SessionState.CLOSED
        eventually(lambda: cp.command(command.id).state in COMMAND_MACHINE.final)
        final = cp.command(command.id)
        assert final.state in (CommandState.CANCELLED, CommandState.COMPLETED)
        assert _sent(tmp_path, "#chunks=50 #delay=20 closed over") <= 1
