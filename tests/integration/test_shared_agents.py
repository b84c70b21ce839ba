"""Agent processes shared by several sessions (actors/agent_pool.py), with the example agent
as real subprocesses: routing keeps each session's updates its own, a shared process that
dies is every session's own failure, and processes end when nobody needs them."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from control_plane import ControlPlane
from state_machines import CommandState
from state_machines.event_kinds import EventKind
from store import SpawnResult
from tests.conftest import eventually
from tests.support.cp_harness import example_agent, message_chunks, open_cp

pytestmark = pytest.mark.timeout(120)


def _cmd(spawned: SpawnResult) -> str:
    assert spawned.command is not None
    return spawned.command.id


def _starts(outcome: str) -> float:
    value = REGISTRY.get_sample_value("acpctl_agent_starts_total", {"outcome": outcome})
    return value or 0.0


def _pids(cp: ControlPlane, session_id: str) -> list[int]:
    return [
        int(e.payload["pid"])
        for e in cp.events(session_id)
        if e.kind == EventKind.AGENT_STARTED and e.payload.get("pid")
    ]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes; the reaper reaps its agent.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _messages(cp: ControlPlane, session_id: str) -> list[str]:
    return message_chunks(cp.events(session_id))


def test_sessions_share_processes_up_to_capacity_and_keep_their_own_updates(
    tmp_path: Path,
) -> None:
    agent = example_agent(tmp_path)
    before = {o: _starts(o) for o in ("started", "joined")}
    with open_cp(tmp_path, sessions_per_agent=3, max_running_turns=8) as cp:
        # Started together: five sessions on two processes (3 + 2), turns overlapping.
        spawned = [cp.spawn(agent, str(tmp_path), f"#delay=20 token-{i}-first") for i in range(5)]
        for s in spawned:
            assert cp.wait(_cmd(s), 60).state is CommandState.COMPLETED
        pids = {pid for s in spawned for pid in _pids(cp, s.session.id)}
        assert len(pids) == 2
        # The metric tells processes started from sessions that joined a running one.
        assert _starts("started") - before["started"] == 2
        assert _starts("joined") - before["joined"] == 3
        # A second round at once: each session still hears only its own agent replies.
        commands = [
            cp.prompt(s.session.id, f"#delay=20 token-{i}-second") for i, s in enumerate(spawned)
        ]
        for command in commands:
            assert cp.wait(command.id, 60).state is CommandState.COMPLETED
        for i, s in enumerate(spawned):
            text = "".join(_messages(cp, s.session.id))
            assert f"token-{i}-first" in text and f"token-{i}-second" in text
            others = [f"token-{j}-" for j in range(5) if j != i]
            assert not any(other in text for other in others), text
            assert cp.wait(commands[i].id, 1).text.strip().endswith(f"token-{i}-second")


def test_a_shared_process_that_dies_is_each_sessions_own_failure(tmp_path: Path) -> None:
    agent = example_agent(tmp_path)
    with open_cp(tmp_path, sessions_per_agent=4) as cp:
        a = cp.spawn(agent, str(tmp_path), "hello a")
        b = cp.spawn(agent, str(tmp_path), "hello b")
        c = cp.spawn(agent, str(tmp_path), "hello c")
        for s in (a, b, c):
            assert cp.wait(_cmd(s), 60).state is CommandState.COMPLETED
        (pid,) = {p for s in (a, b, c) for p in _pids(cp, s.session.id)}
        # b's turn is running when a's prompt crashes the process they share.
        long_turn = cp.prompt(b.session.id, "#chunks=200 #delay=50 slow")
        eventually(lambda: any("c1 " in t for t in _messages(cp, b.session.id)), 30, "b streams")
        crash = cp.prompt(a.session.id, "#crash")
        assert cp.wait(crash.id, 60).state is CommandState.FAILED
        assert cp.wait(long_turn.id, 60).state is CommandState.FAILED
        eventually(lambda: not _alive(pid), 30, "the crashed agent gone")
        # c was idle: it was told too (its own log says its agent exited) ...
        eventually(
            lambda: any(e.kind == EventKind.AGENT_EXITED for e in cp.events(c.session.id)),
            30,
            "agent_exited in the idle session's log",
        )
        # ... and every session runs its next prompt on a new process.
        for s in (a, b, c):
            again = cp.prompt(s.session.id, f"again {s.session.id[:4]}")
            assert cp.wait(again.id, 60).state is CommandState.COMPLETED
        new_pids = {_pids(cp, s.session.id)[-1] for s in (a, b, c)}
        assert pid not in new_pids and len(new_pids) == 1


def test_a_session_leaving_keeps_the_process_for_the_others_and_the_last_one_ends_it(
    tmp_path: Path,
) -> None:
    agent = example_agent(tmp_path)
    with open_cp(tmp_path, sessions_per_agent=4, shared_agent_idle_s=0.5) as cp:
        a = cp.spawn(agent, str(tmp_path), "hello a")
        b = cp.spawn(agent, str(tmp_path), "hello b")
        for s in (a, b):
            assert cp.wait(_cmd(s), 60).state is CommandState.COMPLETED
        (pid,) = {p for s in (a, b) for p in _pids(cp, s.session.id)}
        cp.close_session(a.session.id)
        assert _alive(pid)
        after = cp.prompt(b.session.id, "still here")
        assert cp.wait(after.id, 60).state is CommandState.COMPLETED
        assert _pids(cp, b.session.id) == [pid]  # no second start, no leftover kill
        # A new session joins the live process (no start of its own).
        c = cp.spawn(agent, str(tmp_path), "hello c")
        assert cp.wait(_cmd(c), 60).state is CommandState.COMPLETED
        assert _pids(cp, c.session.id) == [pid]
        cp.close_session(b.session.id)
        cp.close_session(c.session.id)
        # Nobody left on it: it ends after the idle time.
        eventually(lambda: not _alive(pid), 30, "the idle shared agent ended")


def test_closing_the_control_plane_ends_shared_processes_at_once(tmp_path: Path) -> None:
    agent = example_agent(tmp_path)
    cp = open_cp(tmp_path, sessions_per_agent=4, shared_agent_idle_s=3600)
    try:
        a = cp.spawn(agent, str(tmp_path), "hello a")
        assert cp.wait(_cmd(a), 60).state is CommandState.COMPLETED
        (pid,) = _pids(cp, a.session.id)
        cp.close_session(a.session.id)  # the process waits an hour for a next session ...
        assert _alive(pid)
    finally:
        cp.close()
    assert not _alive(pid)  # ... unless the control plane stops: agents die with it


def test_a_hung_turn_leaves_the_shared_process_to_the_others(tmp_path: Path) -> None:
    agent = example_agent(tmp_path)
    with open_cp(tmp_path, sessions_per_agent=4, turn_timeout_s=2, cancel_grace_s=0.5) as cp:
        a = cp.spawn(agent, str(tmp_path), "hello a")
        b = cp.spawn(agent, str(tmp_path), "hello b")
        for s in (a, b):
            assert cp.wait(_cmd(s), 60).state is CommandState.COMPLETED
        (pid,) = {p for s in (a, b) for p in _pids(cp, s.session.id)}
        hung = cp.prompt(a.session.id, "#hang-hard")  # ignores its cancel
        # b's turn runs beside it on the same process.
        beside = cp.prompt(b.session.id, "#chunks=10 #delay=100 steady")
        assert cp.wait(beside.id, 60).state is CommandState.COMPLETED
        failed = cp.wait(hung.id, 60)
        assert failed.state is CommandState.FAILED
        assert "shared agent process" in (failed.error or "")
        # The process was not killed for a's sake: b goes on using it.
        assert _alive(pid)
        after = cp.prompt(b.session.id, "after the hang")
        assert cp.wait(after.id, 60).state is CommandState.COMPLETED
        assert _pids(cp, b.session.id) == [pid]
        # a gets a process of its own at its next prompt (or joins one with room).
        again = cp.prompt(a.session.id, "back")
        assert cp.wait(again.id, 60).state is CommandState.COMPLETED


def test_sessions_come_back_to_shared_processes_after_a_restart_without_replays_recorded(
    tmp_path: Path,
) -> None:
    agent = example_agent(tmp_path)
    db = str(tmp_path / "cp.db")
    with open_cp(tmp_path, db, sessions_per_agent=4) as cp:
        spawned = [cp.spawn(agent, str(tmp_path), f"first {i}") for i in range(3)]
        for s in spawned:
            assert cp.wait(_cmd(s), 60).state is CommandState.COMPLETED
        before = {s.session.id: len(_messages(cp, s.session.id)) for s in spawned}
    with open_cp(tmp_path, db, sessions_per_agent=4) as cp:
        commands = [cp.prompt(s.session.id, f"second {i}") for i, s in enumerate(spawned)]
        for command in commands:
            assert cp.wait(command.id, 60).state is CommandState.COMPLETED
        for i, s in enumerate(spawned):
            started = [e for e in cp.events(s.session.id) if e.kind == EventKind.AGENT_STARTED]
            assert started[-1].payload.get("acpSessionId") == started[0].payload.get(
                "acpSessionId"
            )  # restored (loaded), not a new session
            messages = _messages(cp, s.session.id)
            # The load's replay of "first i" is not recorded again: only the new reply.
            assert len(messages) - before[s.session.id] == len(
                cp.wait(commands[i].id, 1).text.split()
            )
        assert len({_pids(cp, s.session.id)[-1] for s in spawned}) == 1


def test_sessions_starting_at_once_share_the_process_being_started(tmp_path: Path) -> None:
    agent = example_agent(tmp_path)
    with open_cp(tmp_path, sessions_per_agent=8, max_running_turns=8) as cp:
        results: list[Any] = []
        lock = threading.Lock()

        def spawn(i: int) -> None:
            spawned = cp.spawn(agent, str(tmp_path), f"at once {i}")
            with lock:
                results.append(spawned)

        threads = [threading.Thread(target=spawn, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s in results:
            assert cp.wait(_cmd(s), 60).state is CommandState.COMPLETED
        assert len({p for s in results for p in _pids(cp, s.session.id)}) == 1
