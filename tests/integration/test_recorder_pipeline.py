"""The recorder's write pipeline follows its table (state_machines/recorder.py): each state
it passes through, driven on a real store (both backends), and the failed state, which is
final."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from actors.session.recorder import StoreRecorder
from state_machines import StaleEpoch
from state_machines.recorder import RECORDER_MACHINE, RecorderEvent, RecorderState
from store import Store
from tests.conftest import AGENT
from tests.support.update_frames import chunk_frame

PROMPT = [{"type": "text", "text": "hello"}]


class Traced(StoreRecorder):
    """The recorder, with every state it enters noted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trail: list[tuple[RecorderState, RecorderEvent, RecorderState]] = []

    def _to(self, event: RecorderEvent) -> None:
        before = self.state
        super()._to(event)
        self.trail.append((before, event, self.state))


def _state(recorder: StoreRecorder) -> RecorderState:
    return recorder.state  # read afresh each time (the writer thread moves it)


def _updates(store: Store, session_id: str) -> int:
    return sum(1 for e in store.events(session_id) if e.kind == "session_update")


def test_the_table_reaches_every_state_and_failed_is_final() -> None:
    assert RECORDER_MACHINE.states() == set(RecorderState)
    assert RECORDER_MACHINE.final == {RecorderState.FAILED}
    assert not any(src is RecorderState.FAILED for src, _ in RECORDER_MACHINE.transitions)
    # Only a write in flight can be refused, lost or written.
    for event in (RecorderEvent.REFUSED, RecorderEvent.LOST, RecorderEvent.WRITTEN):
        assert RECORDER_MACHINE.sources(event) == {RecorderState.IN_FLIGHT}


def test_a_turn_goes_idle_armed_in_flight_and_back_to_idle(store: Store, tmp_path: Path) -> None:
    spawned = store.spawn(AGENT, str(tmp_path), None, PROMPT, None)
    sid = spawned.session.id
    recorder = Traced(store, sid, min_interval_s=0.3)

    async def run() -> None:
        recorder.updates([chunk_frame(0)])  # nothing written for a while: goes at once
        await asyncio.wrap_future(recorder.flush_future())
        recorder.updates([chunk_frame(1)])  # within the interval: waits on a timer
        assert recorder.state is RecorderState.ARMED
        recorder.updates([chunk_frame(2)])  # the armed timer takes it along
        while _state(recorder) is not RecorderState.IDLE or _updates(store, sid) < 3:
            await asyncio.sleep(0.01)

    asyncio.run(run())
    assert _updates(store, sid) == 3
    assert all(RECORDER_MACHINE.transitions[(a, e)] == b for a, e, b in recorder.trail)
    states = [b for _, _, b in recorder.trail]
    assert states[0] is RecorderState.IN_FLIGHT and states[-1] is RecorderState.IDLE
    assert RecorderState.ARMED in states
    assert RecorderState.FAILED not in states


def test_a_lost_write_fails_the_pipeline_for_good(store: Store, tmp_path: Path) -> None:
    """A write of frames refused for good (the owner was fenced: its epoch is stale) ends in
    ``failed``: what waits fails with it, and nothing is written behind the lost frames."""
    spawned = store.spawn(AGENT, str(tmp_path), None, PROMPT, None)
    sid = spawned.session.id
    recorder = Traced(store, sid)
    recorder.epoch = 999  # not the session's epoch: every write of frames is refused
    recorder.updates([chunk_frame(0)])
    with pytest.raises(StaleEpoch):
        recorder.flush_future().result(30)
    assert recorder.failed and recorder.state is RecorderState.FAILED
    recorder.updates([chunk_frame(1)])  # dropped: it would follow the lost frame
    recorder.epoch = None
    with pytest.raises(StaleEpoch):
        recorder.flush_future().result(1)
    with pytest.raises(StaleEpoch):
        recorder.write_after(lambda ctx: None).result(1)
    assert _updates(store, sid) == 0
    assert recorder.trail[-1] == (
        RecorderState.IN_FLIGHT,
        RecorderEvent.LOST,
        RecorderState.FAILED,
    )
