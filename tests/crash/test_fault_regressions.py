"""Three bugs the fault loop (tests/crash/test_fault_loop.py) found, each made deterministic:
a JSONL append refused by a full disk that reached the file later from Python's buffer, a
prompt during a slow passivation recovered as a dead owner's, and a prompt an orderly stop cut
short sent twice into one conversation."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from actors.delivery.sinks import JsonlFileSink, event_line
from control_plane import (
    CommandState,
    ControlPlane,
    SessionState,
)
from state_machines.interrupted_turns import DEFAULT_CONTINUATION
from store import EventRecord
from tests.integration.test_storage_faults import _fill
from tests.support.cp_harness import FAST, example_agent, invocations
from tests.support.fault_checks import sink_ids


def _event(i: int, pad: int = 400) -> EventRecord:
    raw = json.dumps({"i": i, "text": "x" * pad})
    return EventRecord(i, "s", i, None, "session_update", raw, time.time())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("another_deliverer", [False, True], ids=["alone", "two-deliverers"])
def test_a_sink_append_refused_by_a_full_disk_is_not_written_later(
    fault_disk: Path, another_deliverer: bool
) -> None:
    """What the fault loop hit, step by step: the disk fills, a JSONL sink's append is
    refused (``ENOSPC``: the projector keeps the checkpoint and retries), the disk frees.
    The file must then hold every event once, in order, and nothing torn, whether this sink
    retries alone or another deliverer (another process resuming the binding) appended the
    same events first."""
    path = fault_disk / "sink.jsonl"
    sink = JsonlFileSink(str(path), "store")
    if another_deliverer:
        # Most of a page left: the refused append (~4.8 KB) writes a part, the rest stays
        # in the file object's buffer.
        sink.deliver([_event(0)])
        batch = [_event(i) for i in range(1, 11)]
    else:
        # A file ending on a page boundary: not one byte of the refused append (~2.4 KB, a
        # commit's worth) fits, and all of it stays in the buffer.
        line = len(json.dumps(event_line(_event(0, 0), "store"), separators=(",", ":"))) + 1
        sink.deliver([_event(0, 4096 - line)])
        assert path.stat().st_size == 4096
        batch = [_event(i) for i in range(1, 6)]
    filler = _fill(fault_disk)
    with pytest.raises(OSError):
        sink.deliver(batch)
    filler.unlink()
    if another_deliverer:
        JsonlFileSink(str(path), "store").deliver(batch)
    sink.deliver(batch)  # the projector's retry
    assert sink_ids(path) == ([0] + [e.id for e in batch], 0)


@pytest.mark.timeout(60)
def test_a_prompt_during_a_slow_passivation_is_not_recovered_as_a_dead_owners(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the loop hit, made deterministic: the session's actor passivates and its
    ``on_stop`` takes a while (as when its agent is slow to stop, or its last output waits
    for a store that refuses writes); a prompt arrives meanwhile. The prompt must complete,
    once, and the session end idle, with nothing recovered in this live process."""
    from actors.session.actor import SessionActor

    slow = threading.Event()
    on_stop = SessionActor.on_stop

    def slow_on_stop(self: SessionActor) -> None:
        if slow.is_set():
            time.sleep(1.5)
        on_stop(self)

    monkeypatch.setattr(SessionActor, "on_stop", slow_on_stop)
    settings = replace(FAST, log_dir=str(tmp_path / "logs"), passivate_after_s=0.5)
    with ControlPlane.open(tmp_path / "cp.db", settings=settings) as cp:
        spawned = cp.spawn(example_agent(tmp_path), tmp_path, "hi", idempotency_key="s")
        assert spawned.command is not None
        assert cp.wait(spawned.command.id, 60).state is CommandState.COMPLETED
        sid = spawned.session.id
        slow.set()
        deadline = time.monotonic() + 10
        while cp.live_sessions() and time.monotonic() < deadline:
            time.sleep(0.02)  # passivating: the actor is "dead", its on_stop sleeps
        assert not cp.live_sessions()
        slow.clear()
        command = cp.prompt(sid, "#chunks=40 #delay=50 during the passivation")
        outcome = cp.wait(command.id, 60)
        kinds = [e.kind for e in cp.events(sid) if e.command_id == command.id]
        assert (outcome.state, kinds.count("interrupted")) == (CommandState.COMPLETED, 0)
        assert cp.get(sid).state is SessionState.IDLE


@pytest.mark.timeout(90)
@pytest.mark.parametrize("policy", ["continue", "report"])
def test_a_prompt_an_orderly_stop_cut_short_is_not_sent_twice_into_one_conversation(
    tmp_path: Path, policy: str
) -> None:
    """What the loop hit, made deterministic: a control plane is closed in order (as a
    finished driver, or Ctrl-C, does) while a turn runs; the next one resumes the agent's
    conversation, which holds the prompt already. The prompt must not go into it again: the
    command is continued (the continuation prompt, the default) or, with ``report``, ends
    ``interrupted`` (not sent again), as after a crash."""
    db = tmp_path / "cp.db"
    settings = replace(FAST, log_dir=str(tmp_path / "logs"), interrupted_turns=policy)
    text = "#chunks=60 #delay=50 cut short by an orderly stop"
    with ControlPlane.open(db, settings=settings) as cp:
        spawned = cp.spawn(example_agent(tmp_path), tmp_path, "hi", idempotency_key="s")
        assert spawned.command is not None
        assert cp.wait(spawned.command.id, 60).state is CommandState.COMPLETED
        command = cp.prompt(spawned.session.id, text)
        deadline = time.monotonic() + 30
        while not any(i["message"] == text for i in invocations(tmp_path)):
            assert time.monotonic() < deadline
            time.sleep(0.02)  # the agent has the prompt in its conversation
    with ControlPlane.open(db, settings=settings) as cp:
        outcome = cp.wait(command.id, 60)
        sent = [i for i in invocations(tmp_path) if i["message"] == text]
        assert len({i["sessionId"] for i in sent}) == 1  # one conversation, resumed
        expected = CommandState.COMPLETED if policy == "continue" else CommandState.INTERRUPTED
        assert (len(sent), outcome.state) == (1, expected), outcome
        continued = [i for i in invocations(tmp_path) if i["message"] == DEFAULT_CONTINUATION]
        assert len(continued) == (1 if policy == "continue" else 0)
