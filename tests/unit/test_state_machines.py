from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from state_machines import (
    COMMAND_MACHINE,
    SESSION_MACHINE,
    CommandEvent,
    CommandState,
    IllegalTransition,
    SessionEvent,
    SessionState,
)
from state_machines.diagram import state_machines_markdown

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


def test_every_state_is_reachable_from_the_initial_state() -> None:
    for table in (SESSION_MACHINE, COMMAND_MACHINE):
        seen = {table.initial}
        frontier = [table.initial]
        while frontier:
            state = frontier.pop()
            for (src, _), dst in table.transitions.items():
                if src == state and dst not in seen:
                    seen.add(dst)
                    frontier.append(dst)
        assert seen == table.states()


def test_committed_state_machine_doc_matches_the_tables() -> None:
    committed = (ROOT / "docs" / "state-machines.md").read_text()
    assert committed == state_machines_markdown(), (
        "docs/state-machines.md is stale: run "
        "`python -m state_machines.diagram > docs/state-machines.md`"
    )


class SessionAndCommandMachines(RuleBasedStateMachine):
    """Random event sequences against both tables, with the invariants that must hold."""

    def __init__(self) -> None:
        super().__init__()
        self.session = SESSION_MACHINE.initial
        self.command = COMMAND_MACHINE.initial
        self.ever_closed = False
        self.final_command: CommandState | None = None

    @rule(event=st.sampled_from(list(SessionEvent)))
    def session_event(self, event: SessionEvent) -> None:
        before = self.session
        if SESSION_MACHINE.allows(before, event):
            self.session = SESSION_MACHINE.next_state(before, event)
        else:
            with pytest.raises(IllegalTransition):
                SESSION_MACHINE.next_state(before, event)
            assert self.session is before  # unchanged after a refused event
        if self.session is SessionState.CLOSED:
            self.ever_closed = True

    @rule(event=st.sampled_from(list(CommandEvent)))
    def command_event(self, event: CommandEvent) -> None:
        before = self.command
        try:
            self.command = COMMAND_MACHINE.next_state(before, event)
        except IllegalTransition as exc:
            assert exc.state == before and exc.event == event
            assert self.command is before
        if self.command in COMMAND_MACHINE.final and self.final_command is None:
            self.final_command = self.command

    @invariant()
    def closed_is_terminal(self) -> None:
        if self.ever_closed:
            assert self.session is SessionState.CLOSED

    @invariant()
    def a_command_outcome_never_changes(self) -> None:
        if self.final_command is not None:
            assert self.command is self.final_command

    @invariant()
    def states_are_known(self) -> None:
        assert self.session in SESSION_MACHINE.states()
        assert self.command in COMMAND_MACHINE.states()


TestStateMachineProperties = SessionAndCommandMachines.TestCase
