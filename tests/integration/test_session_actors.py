"""Session actors and the supervisor, with the example agent as a real subprocess."""

from __future__ import annotations

import functools
import socket
import threading
import time
from pathlib import Path

import pytest

from control_plane import CommandState, ControlPlane, SessionState
from state_machines import StaleEpoch
from store import AgentSpec, ops
from tests.conftest import eventually, pid_alive
from tests.support.cp_harness import example_agent, invocations, noop_agent, open_cp


def _gone(pid: int) -> bool:
    return not pid_alive(pid)


def _messages(tmp: Path) -> list[str]:
    return [i["message"] for i in invocations(tmp)]


def _running_turn(cp: ControlPlane, tmp: Path, agent: AgentSpec | None = None) -> tuple[str, str]:
    """A new session whose first turn (``#hang``) is running: (session id, command id)."""
    spawned = cp.spawn(agent or example_agent(tmp), tmp, "#hang")
    assert spawned.command is not None
    eventually(lambda: cp.get(spawned.session.id).state is SessionState.RUNNING)
    return spawned.session.id, spawned.command.id


def test_prompts_from_many_threads_run_one_at_a_time_in_seq_order(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        sid = cp.spawn(example_agent(tmp_path), tmp_path).session.id
        ids: list[str] = []
        lock = threading.Lock()

        def submit(n: int) -> None:
            for i in range(3):
                cmd = cp.prompt(sid, f"#chunks=3 #delay=5 m{n}-{i}")
                with lock:
                    ids.append(cmd.id)

        threads = [threading.Thread(target=submit, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        outcomes = [cp.wait(i, 60) for i in ids]
        assert all(o.state is CommandState.COMPLETED for o in outcomes)
        by_seq = sorted(cp.commands(sid), key=lambda c: c.seq)
        expected = [c.payload["content"][0]["text"] for c in by_seq]
        assert _messages(tmp_path) == expected
        kinds = [e.kind for e in cp.events(sid) if e.kind in ("prompt", "turn_ended")]
        assert kinds == ["prompt", "turn_ended"] * 18  # never two turns at once


def test_collect_mode_merges_prompts_queued_during_a_turn(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        spawned = cp.spawn(
            example_agent(tmp_path), tmp_path, "#chunks=10 #delay=100 first", queue_mode="collect"
        )
        sid = spawned.session.id
        assert spawned.command is not None
        eventually(lambda: cp.get(sid).state is SessionState.RUNNING)
        later = [cp.prompt(sid, f"part{i}") for i in range(3)]
        outcomes = [cp.wait(c.id, 60) for c in later]
        assert cp.wait(spawned.command.id, 60).ok
        assert len(invocations(tmp_path)) == 2  # the three follow-ups ran as one turn
        assert {o.text for o in outcomes} == {outcomes[0].text}
        assert all(f"part{i}" in _messages(tmp_path)[1] for i in range(3))


def test_steer_cancels_the_running_turn_and_runs_next(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        sid, turn = _running_turn(cp, tmp_path)
        later = cp.prompt(sid, "later")
        steered = cp.prompt(sid, "steered", mode="steer")
        assert cp.wait(turn, 30).state is CommandState.CANCELLED
        assert cp.wait(steered.id, 30).ok
        assert cp.wait(later.id, 30).ok
        assert _messages(tmp_path) == ["#hang", "steered", "later"]


def test_interrupt_cancels_the_turn_and_the_queue(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        sid, turn = _running_turn(cp, tmp_path)
        queued = cp.prompt(sid, "queued")
        now = cp.prompt(sid, "now", mode="interrupt")
        assert cp.wait(turn, 30).state is CommandState.CANCELLED
        assert cp.wait(queued.id, 30).state is CommandState.CANCELLED
        assert cp.wait(now.id, 30).ok
        assert _messages(tmp_path) == ["#hang", "now"]


def test_cancel_during_a_turn_ends_it_cancelled_and_the_session_idle(
    tmp_path: Path, db: str
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        sid, turn = _running_turn(cp, tmp_path, noop_agent())
        cp.cancel(sid)
        outcome = cp.wait(turn, 30)
        assert outcome.state is CommandState.CANCELLED and outcome.stop_reason == "cancelled"
        eventually(lambda: cp.get(sid).state is SessionState.IDLE)
        assert cp.wait(cp.prompt(sid, "still works").id, 30).ok


def test_turn_timeout_kills_the_agent_then_the_next_prompt_recovers(
    tmp_path: Path, db: str
) -> None:
    with open_cp(tmp_path, db=db, turn_timeout_s=1.0, cancel_grace_s=0.5) as cp:
        spawned = cp.spawn(example_agent(tmp_path), tmp_path, "remember the kiwi")
        sid = spawned.session.id
        assert spawned.command is not None
        assert cp.wait(spawned.command.id, 30).ok
        hung = cp.prompt(sid, "#hang-hard")
        outcome = cp.wait(hung.id, 30)
        assert outcome.state is CommandState.FAILED
        assert outcome.error is not None
        eventually(lambda: cp.get(sid).state is SessionState.ERROR)
        nxt = cp.wait(cp.prompt(sid, "#history").id, 30)
        assert nxt.ok and "remember the kiwi" in nxt.text
        assert cp.get(sid).state is SessionState.IDLE
        hows = [e.payload["how"] for e in cp.events(sid) if e.kind == "agent_started"]
        assert hows[0] == "new" and hows[-1] in ("resumed", "loaded")


def test_same_prompt_key_runs_once_also_across_a_restart(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        sid = cp.spawn(example_agent(tmp_path), tmp_path, idempotency_key="s").session.id
        first = cp.prompt(sid, "only once", idempotency_key="p1")
        again = cp.prompt(sid, "only once", idempotency_key="p1")
        assert again.id == first.id
        assert cp.wait(first.id, 30).ok
    with open_cp(tmp_path, db=db) as cp:
        sid2 = cp.spawn(example_agent(tmp_path), tmp_path, idempotency_key="s").session.id
        assert sid2 == sid
        replay = cp.prompt(sid, "only once", idempotency_key="p1")
        assert replay.id == first.id and replay.state is CommandState.COMPLETED
        # Commands run in order: had the replay queued a second run, it would run first.
        assert cp.wait(cp.prompt(sid, "after the replay").id, 30).ok
    assert _messages(tmp_path) == ["only once", "after the replay"]


def test_idle_sessions_are_passivated_and_reactivate_on_the_next_command(
    tmp_path: Path, db: str
) -> None:
    with open_cp(tmp_path, db=db, passivate_after_s=0.3) as cp:
        spawned = cp.spawn(example_agent(tmp_path), tmp_path, "remember the plum")
        sid = spawned.session.id
        assert spawned.command is not None
        assert cp.wait(spawned.command.id, 30).ok
        pid = next(e.payload["pid"] for e in cp.events(sid) if e.kind == "agent_started")
        eventually(lambda: sid not in cp.live_sessions())
        eventually(lambda: not pid_alive(pid))
        eventually(lambda: cp.get(sid).owner is None)  # ownership released while passive
        nxt = cp.wait(cp.prompt(sid, "#history").id, 30)
        assert nxt.ok and "remember the plum" in nxt.text
        # Once at the spawn, once for the prompt after passivation. A machine starved of CPU
        # for a whole node lease (seen under three test suites at once) stops every actor of
        # the node, and the next command activates the session once more: legitimately.
        losses = cp._supervisor.lease.losses
        assert 2 <= cp._supervisor.activations <= 2 + losses


@pytest.mark.timeout(120)
def test_max_live_agents_passivates_the_least_recently_used_idle_sessions(
    tmp_path: Path,
    db: str,
) -> None:
    """Five sessions used one after the other with a cap of two live agents: the three used
    longest ago are passivated (agents gone) well before passivate_after_s, the two most
    recent stay live, and an evicted session's next prompt finds its history."""
    with open_cp(tmp_path, db=db, max_live_agents=2, passivate_after_s=3600) as cp:
        sids, pids = [], []
        for i in range(5):
            spawned = cp.spawn(example_agent(tmp_path), tmp_path, f"remember fruit {i}")
            assert spawned.command is not None
            assert cp.wait(spawned.command.id, 30).ok
            sid = spawned.session.id
            sids.append(sid)
            pids.append(next(e.payload["pid"] for e in cp.events(sid) if e.kind == "agent_started"))
        eventually(lambda: sorted(cp.live_sessions()) == sorted(sids[3:]))
        for pid in pids[:3]:
            eventually(functools.partial(_gone, pid))
        assert all(pid_alive(pid) for pid in pids[3:])
        back = cp.wait(cp.prompt(sids[0], "#history").id, 30)
        assert back.ok and "remember fruit 0" in back.text
        # sids[0] is now the most recent: the least recent of the other two goes instead
        eventually(lambda: sorted(cp.live_sessions()) == sorted([sids[0], sids[4]]))


def test_max_running_turns_holds_and_idle_sessions_do_not_count(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db, max_running_turns=2) as cp:
        idle = [cp.spawn(noop_agent(), tmp_path, f"idle {i}") for i in range(2)]
        for s in idle:
            assert s.command is not None
            assert cp.wait(s.command.id, 30).ok
        # Two idle sessions with live agents exist; they must not block new work. The busy
        # turns hang until cancelled, so the two admitted ones are certainly running at the
        # same time (no reliance on agent start-up times); each is cancelled once both run.
        busy = [cp.spawn(noop_agent(), tmp_path, "#hang") for _ in range(4)]
        ids = [b.command.id for b in busy if b.command is not None]
        peak = 0
        deadline = time.monotonic() + 90
        while not all(cp.result(i) for i in ids):
            assert time.monotonic() < deadline, "the busy sessions did not all get their turn"
            running = cp.list_sessions(state=SessionState.RUNNING)
            peak = max(peak, len(running))
            if len(running) == 2 or (running and all(cp.result(i) for i in ids[:2])):
                for session in running:
                    cp.cancel(session.id)
            time.sleep(0.02)
        assert all(cp.result(i).state is CommandState.CANCELLED for i in ids)  # type: ignore[union-attr]
        assert peak == 2
        assert cp._supervisor.slots.peak <= 2


def test_stale_epoch_writes_are_refused_after_a_takeover(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        sid = cp.spawn(noop_agent(), tmp_path).session.id
        cp.close()
    from store import Store

    with Store.open(db) as store:
        host = socket.gethostname()
        # pids that cannot exist on this host: owners that died
        first = store.write(lambda ctx: ops.acquire(ctx, sid, f"{host}:99999991:1"))
        second = store.write(lambda ctx: ops.acquire(ctx, sid, f"{host}:99999992:1"))
        assert second == first + 1
        with pytest.raises(StaleEpoch):
            store.write(lambda ctx: ops.check_epoch(ctx.conn, sid, first))


def test_cancel_and_close_from_another_process_reach_the_owners_agent(
    tmp_path: Path, db: str
) -> None:
    from control_plane import ControlPlane

    with open_cp(tmp_path, db=db) as cp:
        sid, turn = _running_turn(cp, tmp_path, noop_agent())
        # like `acpctl sessions cancel`: another opener that only writes the store
        with ControlPlane.open(db, run_sessions=False) as other:
            other.cancel(sid)
        assert cp.wait(turn, 30).state is CommandState.CANCELLED
        pid = next(e.payload["pid"] for e in cp.events(sid) if e.kind == "agent_started")
        with ControlPlane.open(db, run_sessions=False) as other:
            other.close_session(sid)
        eventually(lambda: sid not in cp.live_sessions())
        eventually(lambda: not pid_alive(pid))


@pytest.mark.timeout(60)
def test_an_unknown_message_is_a_loud_error_not_silently_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, db: str
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        spawned = cp.spawn(noop_agent(), tmp_path, "hi")
        assert spawned.command is not None
        assert cp.wait(spawned.command.id, 30).ok
        ref = cp._supervisor._actors[spawned.session.id]
        with caplog.at_level("ERROR"):
            ref.ask("not a message", timeout=10)
        assert "unknown message" in caplog.text
        assert ref.is_alive()  # and the actor serves on
        assert cp.wait(cp.prompt(spawned.session.id, "again").id, 30).ok


def test_set_mode_and_config_option_run_through_the_actor_and_record_the_answer(
    tmp_path: Path,
    db: str,
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        spawned = cp.spawn(example_agent(tmp_path), tmp_path, "hi")
        sid = spawned.session.id
        assert spawned.command is not None and cp.wait(spawned.command.id, 30).ok
        assert cp.wait(cp.set_mode(sid, "plan").id, 30).state is CommandState.COMPLETED
        bad_mode = cp.wait(cp.set_mode(sid, "no-such-mode").id, 30)
        assert bad_mode.state is CommandState.FAILED and "-32602" in (bad_mode.error or "")
        model = cp.command(cp.set_config_option(sid, "model", "no-such-model").id)
        assert cp.wait(model.id, 30).state is CommandState.FAILED
        kinds = [e.kind for e in cp.events(sid)]
        assert kinds.count("session_update") >= 1  # current_mode_update recorded
        assert cp.wait(cp.prompt(sid, "still fine").id, 30).ok
