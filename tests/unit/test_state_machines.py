from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from state_machines import (
    COMMAND_MACHINE,
    SESSION_MACHINE,
    CommandEvent,
    CommandState,
    IllegalTransition,
    SessionEvent,
    SessionState,
)
from state_machines.claim_offer import OFFER_MACHINE, OfferEvent, OfferState
from state_machines.diagram import state_machines_markdown
from state_machines.table import E, S, TransitionTable
from store import Store, StoreOptions, Synchronous
from store.ops._shared import transition_command, transition_session
from tests.conftest import AGENT

ROOT = Path(__file__).resolve().parents[2]


def test_session_happy_path_follows_the_design() -> None:
    s = SessionState.CREATING
    for event, expected in [
        (SessionEvent.CREATED, SessionState.IDLE),
        (SessionEvent.TURN_STARTED, SessionState.RUNNING),
        (SessionEvent.TURN_ENDED, SessionState.IDLE),
        (SessionEvent.TURN_STARTED, SessionState.RUNNING),
        (SessionEvent.CANCEL, SessionState.CANCELLING),
        (SessionEvent.TURN_ENDED, SessionState.IDLE),
        (SessionEvent.AGENT_DIED, SessionState.ERROR),
        (SessionEvent.RESTARTED, SessionState.IDLE),
        (SessionEvent.CLOSE, SessionState.CLOSED),
    ]:
        s = SESSION_MACHINE.next_state(s, event)
        assert s is expected


def test_illegal_event_raises_with_state_and_event() -> None:
    with pytest.raises(IllegalTransition) as info:
        SESSION_MACHINE.next_state(SessionState.IDLE, SessionEvent.TURN_ENDED, subject="s1")
    assert info.value.state == "idle"
    assert info.value.event == "turn_ended"
    assert info.value.subject == "s1"
    assert "not allowed" in str(info.value)


def test_closed_absorbs_close_and_cancel_but_nothing_else() -> None:
    assert (
        SESSION_MACHINE.next_state(SessionState.CLOSED, SessionEvent.CLOSE) is SessionState.CLOSED
    )
    assert (
        SESSION_MACHINE.next_state(SessionState.CLOSED, SessionEvent.CANCEL) is SessionState.CLOSED
    )
    for event in set(SessionEvent) - {SessionEvent.CLOSE, SessionEvent.CANCEL}:
        with pytest.raises(IllegalTransition):
            SESSION_MACHINE.next_state(SessionState.CLOSED, event)


def test_command_final_states_accept_nothing() -> None:
    for state in COMMAND_MACHINE.final:
        for event in CommandEvent:
            assert not COMMAND_MACHINE.allows(state, event)


def test_interrupted_run_can_go_back_to_queued() -> None:
    assert (
        COMMAND_MACHINE.next_state(CommandState.RUNNING, CommandEvent.REQUEUE)
        is CommandState.QUEUED
    )


def test_guard_sources_come_from_the_table() -> None:
    assert SESSION_MACHINE.sources(SessionEvent.TURN_ENDED) == {
        SessionState.RUNNING,
        SessionState.CANCELLING,
    }
    assert COMMAND_MACHINE.sources(CommandEvent.CANCEL) == {
        CommandState.QUEUED,
        CommandState.RUNNING,
    }


def _reachable(table: TransitionTable[S, E]) -> set[S]:
    seen = {table.initial}
    frontier = [table.initial]
    while frontier:
        state = frontier.pop()
        for (src, _), dst in table.transitions.items():
            if src == state and dst not in seen:
                seen.add(dst)
                frontier.append(dst)
    return seen


def test_every_state_is_reachable_from_the_initial_state() -> None:
    assert _reachable(SESSION_MACHINE) == SESSION_MACHINE.states()
    assert _reachable(COMMAND_MACHINE) == COMMAND_MACHINE.states()
    assert _reachable(OFFER_MACHINE) == OFFER_MACHINE.states()


def test_a_claim_offer_is_used_once() -> None:
    """Every path ends in a final state that accepts nothing: an actor publishes a new
    offer, it never reopens one (a write holding a stale offer can take nothing)."""
    for state in OFFER_MACHINE.final:
        assert not [e for e in OfferEvent if OFFER_MACHINE.allows(state, e)]
    assert OFFER_MACHINE.sources(OfferEvent.TAKE) == {OfferState.OPEN}
    assert OFFER_MACHINE.sources(OfferEvent.START) == {OfferState.CLAIMED}


def test_committed_state_machine_doc_matches_the_tables() -> None:
    committed = (ROOT / "docs" / "state-machines.md").read_text()
    assert committed == state_machines_markdown(), (
        "docs/state-machines.md is stale: run "
        "`python -m state_machines.diagram > docs/state-machines.md`"
    )


class StoreFollowsTheTables(RuleBasedStateMachine):
    """Random session and command events through the store's SQL-guarded transitions on a
    real store (each backend), against a model kept with the tables alone. A refused event
    must raise ``IllegalTransition`` and leave the row exactly as it was (state and
    ``updated_at``): the SQL guard can get that wrong, the pure tables cannot. Each run has a
    session and a command of its own, in the one store of the test."""

    def __init__(self, db: str) -> None:
        super().__init__()
        self.store = Store.open(db, StoreOptions(synchronous=Synchronous.NORMAL))
        spawned = self.store.spawn(AGENT, "/w", None, [{"type": "text", "text": "x"}], None)
        assert spawned.command is not None
        self.session_id, self.command_id = spawned.session.id, spawned.command.id
        self.session = SESSION_MACHINE.initial
        self.command = COMMAND_MACHINE.initial
        self.ever_closed = False
        self.final_command: CommandState | None = None

    def teardown(self) -> None:
        self.store.close()

    def _session_row(self) -> tuple[str, float]:
        record = self.store.get_session(self.session_id)
        return record.state.value, record.updated_at.timestamp()

    def _command_row(self) -> tuple[str, str | None]:
        record = self.store.get_command(self.command_id)
        return record.state.value, record.result_json

    @rule(event=st.sampled_from(list(SessionEvent)))
    def session_event(self, event: SessionEvent) -> None:
        before = self._session_row()
        sid = self.session_id
        if SESSION_MACHINE.allows(self.session, event):
            self.store.write(lambda ctx: transition_session(ctx.conn, sid, event))
            self.session = SESSION_MACHINE.next_state(self.session, event)
        else:
            with pytest.raises(IllegalTransition):
                self.store.write(lambda ctx: transition_session(ctx.conn, sid, event))
            assert self._session_row() == before  # the refused event wrote nothing
        if self.session is SessionState.CLOSED:
            self.ever_closed = True

    @rule(event=st.sampled_from(list(CommandEvent)))
    def command_event(self, event: CommandEvent) -> None:
        before = self._command_row()
        cid = self.command_id
        result = json.dumps({"event": event.value})
        if COMMAND_MACHINE.allows(self.command, event):
            self.store.write(lambda ctx: transition_command(ctx, cid, event, result=result))
            self.command = COMMAND_MACHINE.next_state(self.command, event)
        else:
            with pytest.raises(IllegalTransition) as refused:
                self.store.write(lambda ctx: transition_command(ctx, cid, event, result=result))
            assert refused.value.state == self.command and refused.value.event == event
            assert self._command_row() == before  # the refused event wrote nothing
        if self.command in COMMAND_MACHINE.final and self.final_command is None:
            self.final_command = self.command

    @invariant()
    def the_store_holds_what_the_tables_say(self) -> None:
        assert self.store.get_session(self.session_id).state is self.session
        assert self.store.get_command(self.command_id).state is self.command

    @invariant()
    def closed_is_terminal(self) -> None:
        if self.ever_closed:
            assert self.store.get_session(self.session_id).state is SessionState.CLOSED

    @invariant()
    def a_command_outcome_never_changes(self) -> None:
        if self.final_command is not None:
            assert self.store.get_command(self.command_id).state is self.final_command


# Each backend's statements carry the transitions: both stay in the default run.
@pytest.mark.backend_specific
def test_the_store_follows_the_tables(db: str) -> None:
    # A factory is what it calls; its annotation differs between hypothesis releases
    # (untyped in some, ``type[RuleBasedStateMachine]`` in others), so it is called untyped.
    run: Any = run_state_machine_as_test
    run(
        lambda: StoreFollowsTheTables(db),
        settings=settings(max_examples=25, stateful_step_count=25, deadline=None),
    )
