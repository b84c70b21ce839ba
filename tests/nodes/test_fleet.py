"""Three control-plane nodes as separate processes on one PostgreSQL database: a node lost
mid-turn (kill -9), a node that stands still past its lease (SIGSTOP), placement, and a
change made through one node reaching the owner on another at once (LISTEN/NOTIFY)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from control_plane import CommandState, ControlPlane, Placement, SessionState
from protocol.agent.proc_tree import MARKER_ENV
from store import Store
from tests.conftest import eventually, live_pids
from tests.nodes.conftest import DISCOVER_S, LEASE_S, Fleet
from tests.support.cp_harness import FAST, example_agent
from tests.support.direct_sql import query
from tests.support.postgres import PostgresServer
from tests.support.tcp_proxy import TcpProxy

LONG_TURN = "#chunks=60 #delay=100 long"  # about 6 s
# Taken over within lease + one discovery, plus scheduling slack: on a 2-core box running
# other fleets beside this one, a node's discovery and an actor's start can each take
# seconds (three of these tests at once missed a 6 s slack). The time it took is printed.
TAKEOVER_BOUND_S = LEASE_S + DISCOVER_S + 20.0


@contextmanager
def client(fleet: Fleet) -> Iterator[ControlPlane]:
    """A control plane that runs nothing (no node of its own): how a host submits work."""
    settings = replace(FAST, log_dir=str(fleet.work / "logs-client"))
    with ControlPlane.open(fleet.db, settings=settings, run_sessions=False) as cp:
        yield cp


def _running(cp: ControlPlane, command_id: str) -> bool:
    return cp.command(command_id).state is CommandState.RUNNING


def _events_are_whole(db: str, session_id: str) -> None:
    """Seqs 1..last without a gap or a repeat, and last_event_seq agrees."""
    seqs = [
        r[0]
        for r in query(
            db, "SELECT seq FROM events WHERE session_id = ? ORDER BY seq", (session_id,)
        )
    ]
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    ((last,),) = query(db, "SELECT last_event_seq FROM sessions WHERE id = ?", (session_id,))
    assert last == len(seqs)


def _long_turn_running(cp: ControlPlane, work: Path, chunks: int) -> tuple[str, str]:
    """A new session whose first turn (``chunks`` tenths of a second) a node is running:
    (session id, command id)."""
    spawned = cp.spawn(
        example_agent(work), work, f"#chunks={chunks} #delay=100 long", idempotency_key="k"
    )
    assert spawned.command is not None
    command_id = spawned.command.id
    eventually(lambda: _running(cp, command_id), 60, "the long turn running")
    return spawned.session.id, command_id


def _moved_on(cp: ControlPlane, session_id: str, command_id: str, takers: set[str]) -> bool:
    """The lost node's turn was dealt with: a taker owns the session (it runs the command
    again), or the command ended (the interrupted-turn policy reported it)."""
    if cp.get(session_id).owner in takers:
        return True
    return cp.command(command_id).state not in (CommandState.RUNNING, CommandState.QUEUED)


def _run_by(db: str, command_id: str) -> str:
    """The owner id of the node whose agent ran the command: the agent_started event before
    the command's prompt names the node's pid."""
    ((session_id,),) = query(db, "SELECT session_id FROM commands WHERE id = ?", (command_id,))
    rows = query(
        db,
        "SELECT kind, command_id, payload FROM events WHERE session_id = ? ORDER BY seq",
        (session_id,),
    )
    owner = ""
    for kind, cid, payload in rows:
        if kind == "agent_started":
            owner = json.loads(payload).get("node", "")
        if cid == command_id and kind == "prompt":
            return owner
    raise AssertionError(f"no prompt event of {command_id}")


def _agent_marker(db: str, session_id: str) -> bytes:
    with Store.open(db) as store:
        tree = store.get_session(session_id).agent_process
    assert tree is not None
    return f"{MARKER_ENV}={tree['reaperPid']}.{tree['reaperStart']}".encode()


@pytest.mark.timeout(180)
def test_a_node_killed_mid_turn_loses_its_sessions_to_the_others_and_nothing_runs_twice(
    fleet: Fleet,
) -> None:
    for name in ("n0", "n1", "n2"):
        fleet.start(name)
    work = fleet.work
    with client(fleet) as cp:
        # 15 s turns: all six must be running at once, after six agent starts on 2 cores.
        spawned = [
            cp.spawn(
                example_agent(work), work, "#chunks=150 #delay=100 long", idempotency_key=f"s{i}"
            )
            for i in range(6)
        ]
        commands = {s.session.id: s.command.id for s in spawned if s.command is not None}
        eventually(lambda: all(_running(cp, c) for c in commands.values()), 60, "all running")
        owners = {sid: cp.get(sid).owner for sid in commands}
        victim = fleet.by_owner(owners[spawned[0].session.id])
        assert victim is not None
        lost = [sid for sid, owner in owners.items() if owner == victim.owner]
        kept = [sid for sid in commands if sid not in lost]
        victim.kill()
        killed_at = time.monotonic()
        survivors = {n.owner for n in fleet.nodes if n is not victim}

        def taken_over() -> bool:
            return all(_moved_on(cp, sid, commands[sid], survivors) for sid in lost)

        eventually(taken_over, TAKEOVER_BOUND_S, "the lost sessions taken over")
        took_s = time.monotonic() - killed_at
        # Every command ends; the interrupted ones by the interrupted-turn policy.
        finals = {sid: cp.wait(command_id, 90).state for sid, command_id in commands.items()}
        for sid in kept:  # never interrupted: completed once, by its first claim
            assert finals[sid] is CommandState.COMPLETED
            assert cp.command(commands[sid]).attempts == 1
        for sid in lost:
            assert finals[sid] in (CommandState.COMPLETED, CommandState.INTERRUPTED)
            assert cp.command(commands[sid]).attempts <= 2
        # No session is stuck: each takes and runs a new prompt.
        follow = {
            sid: cp.prompt(sid, "#chunks=2 again", idempotency_key="again").id for sid in commands
        }
        for command_id in follow.values():
            assert cp.wait(command_id, 90).state is CommandState.COMPLETED
        for sid in commands:
            _events_are_whole(fleet.db, sid)
            assert cp.get(sid).state is SessionState.IDLE
        for sid in lost:  # their next turn ran on a node still alive
            assert cp.command(follow[sid]).attempts == 1
            assert _run_by(fleet.db, follow[sid]) in survivors
    print(f"takeover after kill -9: {took_s:.1f} s (lease {LEASE_S} s, discovery {DISCOVER_S} s)")


@pytest.mark.timeout(180)
def test_a_node_stopped_past_its_lease_writes_nothing_and_stops_its_agents(
    fleet: Fleet,
) -> None:
    first = fleet.start("a")
    work = fleet.work
    with client(fleet) as cp:
        sid, command_id = _long_turn_running(cp, work, chunks=150)
        assert cp.get(sid).owner == first.owner
        marker = _agent_marker(fleet.db, sid)
        assert live_pids("environ", marker + b"\0"), "a's agent runs"
        epoch_before = cp.get(sid).epoch
        second = fleet.start("b")
        os.kill(first.proc.pid, signal.SIGSTOP)
        eventually(
            lambda: _moved_on(cp, sid, command_id, {second.owner}), TAKEOVER_BOUND_S, "taken over"
        )
        after = cp.prompt(sid, "#chunks=2 while a stands still", idempotency_key="after")
        assert cp.wait(after.id, 60).ok  # b runs it: a is stopped
        assert _run_by(fleet.db, after.id) == second.owner
        taken = cp.get(sid)
        assert taken.epoch > epoch_before
        events_at_takeover = taken.last_event_seq
        os.kill(first.proc.pid, signal.SIGCONT)
        # a notices its lease ran out, stops its actor and with it the agent it ran.
        eventually(lambda: not live_pids("environ", marker + b"\0"), 30, "a's agent gone")
        eventually(lambda: "lease had run out" in first.log_text(), 30, "a saw the lease lost")
        assert cp.wait(command_id, 90).state in (CommandState.COMPLETED, CommandState.INTERRUPTED)
        assert cp.get(sid).owner in (second.owner, None)
        # Whatever was written after the takeover continues the log: no write of a's landed
        # between (a gap or a repeat would show), and the epoch is b's, not a's.
        _events_are_whole(fleet.db, sid)
        assert cp.get(sid).last_event_seq >= events_at_takeover
        # Its fence, not a crash. The fence may find the actor gone already: woken, a's actor
        # can try to record the agent's next frames first, meet b's epoch and stop itself
        # ("taken over by another process"), so the fence stops 1 session or 0.
        log = first.log_text()
        assert "stopping all 1 sessions here" in log or (
            "stopping all 0 sessions here" in log and "taken over by another process" in log
        ), log
        assert first.proc.poll() is None, "a lives on, as a node without these sessions"


@pytest.mark.timeout(180)
def test_placement_pins_a_session_to_its_node_and_labels_let_others_take_over(
    fleet: Fleet,
) -> None:
    a = fleet.start("a", labels=("shared",))
    work = fleet.work
    with client(fleet) as cp:
        pinned = cp.spawn(
            example_agent(work), work, LONG_TURN, idempotency_key="p", placement=Placement(node="a")
        )
        shared = cp.spawn(
            example_agent(work),
            work,
            LONG_TURN,
            idempotency_key="s",
            placement=Placement(labels=("shared",)),
        )
        nowhere = cp.spawn(
            example_agent(work), work, "hi", idempotency_key="g", placement=Placement(node="ghost")
        )
        for s in (pinned, shared):
            assert s.command is not None
            eventually(partial(_running, cp, s.command.id), 60, "running on a")
            assert cp.get(s.session.id).owner == a.owner
        b = fleet.start("b", labels=("shared",))
        fleet.start("c")  # no label: may run neither
        a.kill()
        assert shared.command is not None
        shared_first = shared.command.id
        eventually(
            lambda: _moved_on(cp, shared.session.id, shared_first, {b.owner}),
            TAKEOVER_BOUND_S,
            "b took s",
        )
        next_turn = cp.prompt(shared.session.id, "#chunks=2 on b", idempotency_key="on-b")
        assert cp.wait(next_turn.id, 60).ok
        assert _run_by(fleet.db, next_turn.id) == b.owner
        assert cp.wait(shared_first, 90).state in (
            CommandState.COMPLETED,
            CommandState.INTERRUPTED,
        )
        # Work for the pinned session (its cut-short turn may have ended as interrupted).
        pinned_next = cp.prompt(pinned.session.id, "#chunks=2 later", idempotency_key="later")
        # The pinned session waits for its node; the one for a node that never was, too.
        time.sleep(LEASE_S + 2 * DISCOVER_S + 1)
        with Store.open(fleet.db) as store:
            from store import queries

            waiting = dict(store.read(queries.waiting_for_placement))
        assert waiting.get(pinned.session.id) == "node a"
        assert waiting.get(nowhere.session.id) == "node ghost"
        assert cp.get(pinned.session.id).owner in (None, a.owner)  # nobody else took it
        assert nowhere.command is not None
        assert cp.command(nowhere.command.id).state is CommandState.QUEUED
        assert cp.command(pinned_next.id).state is CommandState.QUEUED
        # Its node comes back (a new process, the same name): the pinned session runs again.
        back = fleet.start("a", labels=("shared",))
        assert cp.wait(pinned_next.id, 90).state is CommandState.COMPLETED
        assert _run_by(fleet.db, pinned_next.id) == back.owner
        follow = cp.prompt(pinned.session.id, "after", idempotency_key="after")
        assert cp.wait(follow.id, 60).state is CommandState.COMPLETED


# The fleet's representative in the default run (the rest run with -m full).
@pytest.mark.backend_specific
@pytest.mark.timeout(120)
def test_a_prompt_and_a_cancel_through_any_node_reach_the_owner_at_once(fleet: Fleet) -> None:
    # Discovery every 60 s: only the notification can explain a prompt taken in seconds.
    owner = fleet.start("a", discover_s=60)
    fleet.start("b", discover_s=60)
    work = fleet.work
    with client(fleet) as cp:
        first = cp.spawn(example_agent(work), work, "#chunks=2 hi", idempotency_key="n")
        assert first.command is not None
        assert cp.wait(first.command.id, 60).ok
        sid = first.session.id
        assert cp.get(sid).owner in {n.owner for n in fleet.nodes}
        started = time.monotonic()
        again = cp.prompt(sid, "#chunks=2 again", idempotency_key="2")
        assert cp.wait(again.id, 30).ok
        assert time.monotonic() - started < 20  # far below the 60 s discovery
        long = cp.prompt(sid, "#chunks=600 #delay=100 long", idempotency_key="3")
        eventually(lambda: _running(cp, long.id), 20, "the long turn running")
        cancelled_at = time.monotonic()
        cp.cancel(sid)
        assert cp.wait(long.id, 30).state is CommandState.CANCELLED
        assert time.monotonic() - cancelled_at < 20
    assert owner.proc.poll() is None


@pytest.mark.timeout(180)
def test_a_node_cut_off_from_the_database_stops_its_agents_and_comes_back_fenced(
    fleet: Fleet, postgres_server: PostgresServer
) -> None:
    proxy = TcpProxy(postgres_server.port)
    try:
        cut_off = fleet.start(
            "a", db=fleet.db.replace(f":{postgres_server.port}/", f":{proxy.port}/")
        )
        work = fleet.work
        with client(fleet) as cp:
            sid, command_id = _long_turn_running(cp, work, chunks=200)
            marker = _agent_marker(fleet.db, sid)
            other = fleet.start("b")
            proxy.cut()
            # a stops its agent within three quarters of its lease (before the others may
            # take the session), then b takes the session over once the lease has run out.
            eventually(
                lambda: not live_pids("environ", marker + b"\0"), LEASE_S + 5, "a's agent stopped"
            )
            eventually(
                lambda: _moved_on(cp, sid, command_id, {other.owner}),
                TAKEOVER_BOUND_S,
                "b took over",
            )
            during = cp.prompt(sid, "#chunks=2 during the cut", idempotency_key="during")
            assert cp.wait(during.id, 60).ok
            assert _run_by(fleet.db, during.id) == other.owner
            proxy.restore()
            eventually(lambda: "lease lost and taken anew" in cut_off.log_text(), 30, "a knows")
            assert "the database was unreachable for most of the lease" in cut_off.log_text()
            assert cp.wait(command_id, 90).state in (
                CommandState.COMPLETED,
                CommandState.INTERRUPTED,
            )
            follow = cp.prompt(sid, "#chunks=2 after", idempotency_key="after")
            assert cp.wait(follow.id, 60).state is CommandState.COMPLETED
            _events_are_whole(fleet.db, sid)
            assert cut_off.proc.poll() is None
    finally:
        proxy.close()


@pytest.mark.timeout(120)
def test_a_watcher_on_another_node_follows_the_turn_as_it_is_committed(fleet: Fleet) -> None:
    """Serve streams and followers on any node: node b watches a session that runs on node a
    (pinned there) and gets a's commits as they happen, each event once in seq order, and
    the command's end; not the whole turn at its end."""
    fleet.start("a")
    work = fleet.work
    settings = replace(FAST, log_dir=str(work / "logs-b"), node_name="b")
    shares: list[tuple[float, list[int], list[str]]] = []
    with ControlPlane.open(fleet.db, settings=settings) as b:
        spawned = b.spawn(
            example_agent(work),
            work,
            "#chunks=2 hi",
            idempotency_key="w",
            placement=Placement(node="a"),
        )
        assert spawned.command is not None
        assert b.wait(spawned.command.id, 60).ok
        sid = spawned.session.id

        woken = threading.Event()
        watch = b.watch_session(sid, woken.set)
        stop = threading.Event()

        def take_on_wake() -> None:  # the watcher's own thread
            while not stop.is_set():
                if woken.wait(0.05):
                    woken.clear()
                    share = watch.take()
                    if share.events or share.finished:
                        shares.append(
                            (
                                time.monotonic(),
                                [e.seq for e in share.events],
                                [r.id for r in share.finished],
                            )
                        )

        taker = threading.Thread(target=take_on_wake, daemon=True)
        taker.start()
        try:
            turn = b.prompt(sid, "#chunks=30 #delay=100 streamed", idempotency_key="s")
            assert b.wait(turn.id, 60).ok
            ended_at = time.monotonic()
            eventually(lambda: any(turn.id in f for _, _, f in shares), 10, "the end handed on")
        finally:
            stop.set()
            taker.join(5)
            watch.close()
        assert b.get(sid).owner != b._supervisor.me  # a ran it: everything came from a
    seqs = [s for _, batch, _ in shares for s in batch]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs  # once each, in order
    assert len(seqs) >= 30
    during = [at for at, batch, _ in shares if batch and at < ended_at - 1.0]
    assert len(during) >= 5, shares  # streamed while the turn ran (3 s of chunks)
