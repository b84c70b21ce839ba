"""The recorder's write pipeline (actors/session/recorder.py): it follows its table
(state_machines/recorder.py) and lives on the protocol loop only, whatever thread asks for a
flush or an outcome write and whichever thread a write ends on. Driven on a real store (both
backends; the refused write on a SQLite file whose lock another connection holds)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from actors.session import recorder as recorder_module
from actors.session.recorder import ANSWER_WAIT_S, RecorderStopped, StoreRecorder
from protocol.loop import ProtocolLoop
from state_machines import CommandState, IllegalTransition, StaleEpoch
from state_machines.recorder import RECORDER_MACHINE, RecorderEvent, RecorderState
from store import NewEvent, Store, StoreOptions, ops
from store.writer import WriteContext
from tests.support.spawned import kinds_after_spawn, spawned_session
from tests.support.update_frames import chunk_frame

# The PostgreSQL variants stay in the default run: the recorder's writes
# are each backend's statements.
pytestmark = pytest.mark.backend_specific

T = TypeVar("T")


class Traced(StoreRecorder):
    """The recorder, with every state it enters noted, and the thread that moved it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trail: list[tuple[RecorderState, RecorderEvent, RecorderState]] = []
        self.threads: set[str] = set()

    def _to(self, event: RecorderEvent) -> None:
        before = self.state
        super()._to(event)
        self.trail.append((before, event, self.state))
        self.threads.add(threading.current_thread().name)

    def _hand_over(self, events: list[tuple[str, str, Any]], urgent: bool = False) -> None:
        self.threads.add(threading.current_thread().name)
        super()._hand_over(events, urgent)


@pytest.fixture
def ploop() -> Iterator[ProtocolLoop]:
    loop = ProtocolLoop(name="test-protocol-loop")
    try:
        yield loop
    finally:
        loop.stop()


def on_loop(ploop: ProtocolLoop, fn: Callable[[], T]) -> T:
    """Run ``fn`` on the protocol loop (where the tap hands frames over) and wait for it."""

    async def run() -> T:
        return fn()

    return ploop.call(run(), 30)


def _state(recorder: StoreRecorder) -> RecorderState:
    return recorder.state  # read afresh each time (mypy would narrow an attribute read)


def _updates(store: Store, session_id: str) -> int:
    return sum(1 for e in store.events(session_id) if e.kind == "session_update")


def _hand(recorder: StoreRecorder, first: int, count: int = 1) -> Callable[[], None]:
    """Hand over frames ``first`` .. ``first + count - 1``, one read each (run it on the loop)."""

    def hand() -> None:
        for i in range(first, first + count):
            recorder.updates([chunk_frame(i)])

    return hand


def test_the_table_reaches_every_state_and_failed_is_final() -> None:
    assert RECORDER_MACHINE.states() == set(RecorderState)
    assert RECORDER_MACHINE.final == {RecorderState.FAILED}
    assert not any(src is RecorderState.FAILED for src, _ in RECORDER_MACHINE.transitions)
    # Only a write in flight can be refused, lost or written.
    for event in (RecorderEvent.REFUSED, RecorderEvent.LOST, RecorderEvent.WRITTEN):
        assert RECORDER_MACHINE.sources(event) == {RecorderState.IN_FLIGHT}


def test_a_turn_goes_idle_armed_in_flight_and_back_to_idle(
    store: Store, tmp_path: Path, ploop: ProtocolLoop
) -> None:
    sid, _ = spawned_session(store, tmp_path)
    recorder = Traced(store, sid, ploop, min_interval_s=0.3)

    async def run() -> None:
        recorder.updates([chunk_frame(0)])  # nothing written for a while: goes at once
        await recorder.flush()
        recorder.updates([chunk_frame(1)])  # within the interval: waits on a timer
        assert recorder.state is RecorderState.ARMED
        recorder.updates([chunk_frame(2)])  # the armed timer takes it along
        while _state(recorder) is not RecorderState.IDLE or _updates(store, sid) < 3:
            await asyncio.sleep(0.01)

    ploop.call(run(), 30)
    assert _updates(store, sid) == 3
    assert all(RECORDER_MACHINE.transitions[(a, e)] == b for a, e, b in recorder.trail)
    states = [b for _, _, b in recorder.trail]
    assert states[0] is RecorderState.IN_FLIGHT and states[-1] is RecorderState.IDLE
    assert RecorderState.ARMED in states
    assert RecorderState.FAILED not in states
    assert recorder.threads == {"test-protocol-loop"}


def test_a_lost_write_fails_the_pipeline_for_good(
    store: Store, tmp_path: Path, ploop: ProtocolLoop
) -> None:
    """A write of frames refused for good (the owner was fenced: its epoch is stale) ends in
    ``failed``: what waits fails with it, and nothing is written behind the lost frames."""
    sid, _ = spawned_session(store, tmp_path)
    recorder = Traced(store, sid, ploop)
    recorder.epoch = 999  # not the session's epoch: every write of frames is refused
    on_loop(ploop, _hand(recorder, 0))
    with pytest.raises(StaleEpoch):
        recorder.flush_future().result(30)
    assert recorder.failed and recorder.state is RecorderState.FAILED
    on_loop(ploop, _hand(recorder, 1))  # dropped: it would follow the lost frame
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
    assert recorder.threads == {"test-protocol-loop"}


def test_recorder_commits_the_outcome_behind_every_frame_handed_over(
    store: Store, tmp_path: Path, ploop: ProtocolLoop
) -> None:
    sid, cid = spawned_session(store, tmp_path)
    store.claim_next(sid)
    recorder = StoreRecorder(store, sid, ploop)
    recorder.command_id = cid
    on_loop(ploop, _hand(recorder, 0, 300))  # some go in flight, the rest wait for it

    def outcome(ctx: WriteContext) -> str:
        ops.append_events(ctx, sid, cid, [NewEvent("turn_ended", {})])
        ops.complete(ctx, cid, {"text": "done"})
        return "ok"

    assert recorder.write_after(outcome).result(30) == "ok"
    assert kinds_after_spawn(store, sid) == ["session_update"] * 300 + ["turn_ended"]
    assert store.get_command(cid).state is CommandState.COMPLETED
    assert recorder.take_text() == "".join(f"c{i} " for i in range(300))
    assert recorder.take_text() == ""  # taken: the next turn starts empty


def test_a_failing_outcome_write_keeps_the_frames_and_reports_its_error(
    store: Store, tmp_path: Path, ploop: ProtocolLoop
) -> None:
    sid, cid = spawned_session(store, tmp_path)
    recorder = StoreRecorder(store, sid, ploop)
    recorder.command_id = cid
    on_loop(ploop, _hand(recorder, 0, 5))
    failed = recorder.write_after(lambda ctx: ops.complete(ctx, cid, {}))  # still queued
    with pytest.raises(IllegalTransition):
        failed.result(30)
    assert kinds_after_spawn(store, sid) == ["session_update"] * 5
    assert not recorder.failed  # the frames committed: recording goes on
    on_loop(ploop, _hand(recorder, 5))
    recorder.flush_future().result(30)
    assert kinds_after_spawn(store, sid) == ["session_update"] * 6


def test_an_outcome_written_alone_that_fails_reports_its_error_and_recording_goes_on(
    store: Store, tmp_path: Path, ploop: ProtocolLoop
) -> None:
    """An outcome with no frames before it is written without a savepoint: its error is
    still its caller's alone, nothing of it stands, and the pipeline records on."""
    sid, cid = spawned_session(store, tmp_path)
    recorder = StoreRecorder(store, sid, ploop)
    recorder.command_id = cid

    def half_then_illegal(ctx: WriteContext) -> None:
        ops.append_events(ctx, sid, cid, [NewEvent("half", {})])  # undone with the write
        ops.complete(ctx, cid, {})  # the command is still queued: IllegalTransition

    with pytest.raises(IllegalTransition):
        recorder.write_after(half_then_illegal).result(30)
    assert kinds_after_spawn(store, sid) == []
    # The write's end was posted to the loop before its caller heard: read behind it.
    assert on_loop(ploop, lambda: _state(recorder)) is RecorderState.IDLE
    assert not recorder.failed
    on_loop(ploop, _hand(recorder, 0, 2))
    assert recorder.write_after(lambda ctx: "ok").result(30) == "ok"
    assert kinds_after_spawn(store, sid) == ["session_update"] * 2


def test_recorder_interval_groups_updates_and_never_delays_a_flush_or_outcome(
    store: Store, tmp_path: Path, ploop: ProtocolLoop
) -> None:
    """With ``min_interval_s``, updates handed over within the interval after a write are
    committed together by one later write; a flush or an outcome goes at once."""
    sid, cid = spawned_session(store, tmp_path)
    store.claim_next(sid)
    recorder = StoreRecorder(store, sid, ploop, min_interval_s=0.5)
    recorder.command_id = cid

    async def run() -> tuple[int, int, float]:
        recorder.updates([chunk_frame(0)])  # nothing written for a while: goes at once
        await recorder.flush()
        batches_before = store.commit_stats[0]
        for i in range(1, 6):  # within the interval: held back, then one write
            recorder.updates([chunk_frame(i)])
            await asyncio.sleep(0.01)
        held = store.commit_stats[0] - batches_before
        await asyncio.sleep(0.7)  # the interval passes: the held updates are written
        await recorder.flush()
        grouped = store.commit_stats[0] - batches_before
        recorder.updates([chunk_frame(6)])  # within the interval of that write again
        started = time.monotonic()
        done = recorder.write_after(lambda ctx: ops.complete(ctx, cid, {"text": "t"}))
        await asyncio.wrap_future(done)
        return held, grouped, time.monotonic() - started

    held, grouped, outcome_wait = ploop.call(run(), 30)
    assert held == 0 and grouped == 1
    assert outcome_wait < 0.4  # the outcome did not wait for the 0.5 s interval
    assert kinds_after_spawn(store, sid) == ["session_update"] * 7
    assert store.get_command(cid).state is CommandState.COMPLETED


def test_recorder_interval_never_holds_back_a_flush_or_a_lifecycle_event(
    store: Store, tmp_path: Path, ploop: ProtocolLoop
) -> None:
    """A flush while the interval's timer is armed writes at once; so does an event (the
    actor's own writes follow events like ``agent_exited``: they must not overtake them)."""
    sid, cid = spawned_session(store, tmp_path)
    recorder = StoreRecorder(store, sid, ploop, min_interval_s=5.0)
    recorder.command_id = cid

    async def run() -> tuple[float, float]:
        recorder.updates([chunk_frame(0)])  # goes at once, starts the interval
        await recorder.flush()
        recorder.updates([chunk_frame(1)])  # held: the timer is armed for ~5 s
        started = time.monotonic()
        await recorder.flush()
        flushed_after = time.monotonic() - started
        recorder.updates([chunk_frame(2)])  # held again
        started = time.monotonic()
        recorder.event("agent_exited", {"exitCode": 1})
        while len(kinds_after_spawn(store, sid)) < 4:
            await asyncio.sleep(0.01)
            assert time.monotonic() - started < 4, "the event waited for the interval"
        return flushed_after, time.monotonic() - started

    flushed_after, event_after = ploop.call(run(), 30)
    assert flushed_after < 4 and event_after < 4
    assert kinds_after_spawn(store, sid) == ["session_update"] * 3 + ["agent_exited"]


def test_flushes_and_outcomes_from_other_threads_while_frames_stream_keep_wire_order(
    store: Store, tmp_path: Path, ploop: ProtocolLoop
) -> None:
    """Frames streaming on the loop, flushes and ``write_after``s asked from two other
    threads at once: every write of the caller's lands behind the frames handed over before
    it was asked, each flush resolves with its frames committed, the log keeps wire order,
    and the pipeline was moved on the loop thread only."""
    sid, cid = spawned_session(store, tmp_path)
    recorder = Traced(store, sid, ploop, min_interval_s=0.002)
    recorder.command_id = cid
    handed = [0]  # frames handed over so far (written on the loop only)
    stop = threading.Event()

    async def stream() -> None:
        for i in range(400):
            recorder.updates([chunk_frame(i)])
            handed[0] = i + 1
            if i % 7 == 0:
                await asyncio.sleep(0.001)
        stop.set()

    failures: list[str] = []

    def ask(tag: str) -> None:
        n = 0
        while not stop.is_set():
            seen = handed[0]
            if n % 2:
                recorder.flush_future().result(30)
                if _updates(store, sid) < seen:
                    failures.append(f"{tag}: flushed with fewer than {seen} frames logged")
            else:
                note = f"{tag}-{n}"

                def log_note(ctx: WriteContext, note: str = note) -> None:
                    ops.append_events(ctx, sid, cid, [NewEvent(note, {})])

                recorder.write_after(log_note).result(30)
                before = [e.kind for e in store.events(sid)].index(note)
                if sum(1 for e in store.events(sid)[:before] if e.kind == "session_update") < seen:
                    failures.append(f"{tag}: {note} logged ahead of frames handed before it")
            n += 1

    askers = [threading.Thread(target=ask, args=(f"t{i}",)) for i in range(2)]
    for thread in askers:
        thread.start()
    ploop.call(stream(), 60)
    for thread in askers:
        thread.join(60)
    recorder.flush_future().result(30)
    assert failures == []
    texts = [
        e.payload["params"]["update"]["content"]["text"]
        for e in store.events(sid)
        if e.kind == "session_update"
    ]
    assert texts == [f"c{i} " for i in range(400)]  # wire order, none lost, none twice
    assert recorder.threads == {"test-protocol-loop"}
    assert all(RECORDER_MACHINE.transitions[(a, e)] == b for a, e, b in recorder.trail)


def test_a_refused_write_is_retried_on_the_loop_and_its_callers_wait_for_it(
    db_path: Path, tmp_path: Path, ploop: ProtocolLoop
) -> None:
    """The store refuses writes for now (another connection holds SQLite's write lock past
    the lock timeout): the write goes back to the front of the queue and is retried on the
    loop's timer; a flush and an outcome asked meanwhile resolve only when it commits."""
    with Store.open(db_path, StoreOptions(lock_timeout_s=0.2)) as store:
        sid, cid = spawned_session(store, tmp_path)
        store.claim_next(sid)
        recorder = Traced(store, sid, ploop)
        recorder.command_id = cid
        holder = sqlite3.connect(db_path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            on_loop(ploop, _hand(recorder, 0, 3))
            flushed = recorder.flush_future()
            ended = recorder.write_after(lambda ctx: ops.complete(ctx, cid, {"text": "t"}))
            deadline = time.monotonic() + 20
            while RecorderEvent.REFUSED not in [e for _, e, _ in recorder.trail]:
                assert time.monotonic() < deadline, "the write was never refused"
                time.sleep(0.02)
            on_loop(ploop, _hand(recorder, 3, 2))  # more frames while refused
            time.sleep(0.5)  # a retry or two, refused again
            assert not flushed.done() and not ended.done()
        finally:
            holder.execute("COMMIT")
            holder.close()
        ended.result(30)
        flushed.result(30)
        on_loop(ploop, lambda: None)  # the loop has handled the last "written"
        assert kinds_after_spawn(store, sid) == ["session_update"] * 5
        assert store.get_command(cid).state is CommandState.COMPLETED
        assert recorder.state is RecorderState.IDLE
        assert recorder.threads == {"test-protocol-loop"}
        assert all(RECORDER_MACHINE.transitions[(a, e)] == b for a, e, b in recorder.trail)


def test_asking_after_the_loop_stopped_fails_at_once_not_after_a_timeout(
    store: Store, tmp_path: Path
) -> None:
    sid, _ = spawned_session(store, tmp_path)
    ploop = ProtocolLoop()
    recorder = StoreRecorder(store, sid, ploop)
    on_loop(ploop, _hand(recorder, 0))
    recorder.flush_future().result(30)
    ploop.stop()
    with pytest.raises(RecorderStopped):
        recorder.flush_future().result(1)
    with pytest.raises(RecorderStopped):
        recorder.write_after(lambda ctx: None).result(1)
    assert _updates(store, sid) == 1


def test_frames_read_with_the_agents_answer_commit_with_the_outcome_it_brings(
    store: Store, tmp_path: Path, ploop: ProtocolLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The raw tap says an answer came (``answer_coming``) before the frames of that read:
    they wait for the turn's outcome (``write_after``, a moment later) and commit with it in
    one transaction, where they would otherwise be in flight already and the outcome would
    take a commit of its own."""
    # The wait is 2 ms: the SDK's tasks bring the outcome a few hundred microseconds after the
    # read, but this test's two hops (the loop, then the test's thread) can take longer on a
    # loaded machine, and the frames then go alone (the next test checks that bound). Here
    # the wait is long enough for any machine: what is checked is that they wait and go with
    # the outcome.
    monkeypatch.setattr(recorder_module, "ANSWER_WAIT_S", 10.0)
    sid, cid = spawned_session(store, tmp_path)
    store.claim_next(sid)
    recorder = StoreRecorder(store, sid, ploop)
    recorder.command_id = cid

    def answered_read() -> None:
        recorder.answer_coming()
        recorder.updates([chunk_frame(0), chunk_frame(1)])

    batches_before = store.commit_stats[0]
    on_loop(ploop, answered_read)
    assert on_loop(ploop, lambda: _state(recorder)) is RecorderState.ARMED  # waiting, unwritten
    time.sleep(0.0005)  # the SDK's tasks reach the outcome a few hundred microseconds later
    recorder.write_after(lambda ctx: ops.complete(ctx, cid, {"text": "c0 c1 "})).result(30)
    assert store.commit_stats[0] - batches_before == 1
    assert kinds_after_spawn(store, sid) == ["session_update"] * 2
    assert store.get_command(cid).state is CommandState.COMPLETED


def test_frames_read_with_an_answer_that_brings_no_write_wait_only_a_moment(
    store: Store, tmp_path: Path, ploop: ProtocolLoop
) -> None:
    """An answer to another request brings no outcome: the frames of its read are written
    once ``ANSWER_WAIT_S`` is over, alone, and the pipeline is idle again."""
    sid, _ = spawned_session(store, tmp_path)
    recorder = StoreRecorder(store, sid, ploop)

    def answered_read() -> None:
        recorder.answer_coming()
        recorder.updates([chunk_frame(0)])

    started = time.monotonic()
    on_loop(ploop, answered_read)
    while _updates(store, sid) < 1:
        assert time.monotonic() - started < 5, "the frames were never written"
        time.sleep(0.001)
    assert time.monotonic() - started >= ANSWER_WAIT_S
    recorder.flush_future().result(30)
    assert on_loop(ploop, lambda: _state(recorder)) is RecorderState.IDLE

    # A flush never waits for an answer: frames handed over with a flush behind them go now.
    def answered_then_flushed() -> Any:
        recorder.answer_coming()
        recorder.updates([chunk_frame(1)])
        return recorder.flush_future()

    flushed = on_loop(ploop, answered_then_flushed)
    flushed.result(30)
    assert _updates(store, sid) == 2


def _usage_frame() -> tuple[str, dict[str, Any]]:
    update = {"sessionUpdate": "usage_update", "used": 1200, "size": 200000}
    message = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "acp-1", "update": update},
    }
    return json.dumps(message), message


def test_a_turns_usage_update_waits_for_the_answer_that_follows_it(
    store: Store, tmp_path: Path, ploop: ProtocolLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude Code and Codex send a turn's ``usage_update`` last, in a read of its own just
    before their answer: during a turn, a read ending in one waits for the outcome as a read
    with the answer does, and both commit together. Outside a turn it goes at once."""
    # As in the test above: the 2 ms wait is shorter than this test's hops on a loaded
    # machine (a CI run failed so); what is checked is that the read waits, not how long.
    monkeypatch.setattr(recorder_module, "ANSWER_WAIT_S", 10.0)
    sid, cid = spawned_session(store, tmp_path)
    store.claim_next(sid)
    recorder = StoreRecorder(store, sid, ploop)

    def usage_alone() -> RecorderState:
        recorder.updates([_usage_frame()])
        return recorder.state

    assert on_loop(ploop, usage_alone) is RecorderState.IN_FLIGHT  # no turn: written at once
    recorder.flush_future().result(30)
    recorder.command_id = cid
    batches_before = store.commit_stats[0]
    on_loop(ploop, lambda: recorder.updates([chunk_frame(0), _usage_frame()]))
    assert on_loop(ploop, lambda: _state(recorder)) is RecorderState.ARMED
    recorder.write_after(lambda ctx: ops.complete(ctx, cid, {"text": "c0 "})).result(30)
    assert store.commit_stats[0] - batches_before == 1
    assert kinds_after_spawn(store, sid) == ["session_update"] * 3
    assert store.get_command(cid).state is CommandState.COMPLETED
