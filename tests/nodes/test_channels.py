"""Notification channels on a fleet (store/listen.py): the owner hears a session's work on its
own channel at once; a node that neither owns nor watches the session hears nothing of it,
not its prompts, not its stream; a node that watches it follows the stream live, hears it
only while the watch is open, and after its listener's connection was killed listens again
and catches up.

Nodes ``a`` and ``c`` are processes (``tests.support.node_driver``: SIGUSR1 prints their
listener's counts); node ``b`` is a control plane in this process (a node of its own: its
own owner id, lease and listener), which is also the client. Sessions are placed on ``a``.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import psycopg
import pytest

from control_plane import ControlPlane, Placement
from store import CommittedEvent
from store.listen import SessionNotifications
from tests.conftest import eventually
from tests.nodes.conftest import Fleet, Node
from tests.support.cp_harness import FAST, example_agent

# Discovery every 60 s: only a notification explains work taken in seconds.
SLOW_DISCOVERY_S = 60.0


@contextmanager
def _this_node(fleet: Fleet) -> Iterator[tuple[ControlPlane, SessionNotifications]]:
    settings = replace(
        FAST,
        log_dir=str(fleet.work / "logs-b"),
        node_name="b",
        discover_interval_s=SLOW_DISCOVERY_S,
    )
    with ControlPlane.open(fleet.db, settings=settings) as cp:
        listener = cp._supervisor.notifications
        assert listener is not None
        eventually(lambda: listener.holds_lock, 30, "node b's listener connected")
        yield cp, listener


def _counts(node: Node) -> dict[str, int]:
    """What node's listener was delivered so far, by channel kind."""
    assert node.proc.stdout is not None
    node.proc.send_signal(signal.SIGUSR1)
    while True:
        line = node.proc.stdout.readline()
        assert line, f"node {node.name} exited: {node.log_text()[-2000:]}"
        if line.startswith("counts "):
            counts: dict[str, int] = json.loads(line.removeprefix("counts "))
            return counts


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {kind: after[kind] - before[kind] for kind in after}


def _placed_on_a(cp: ControlPlane, fleet: Fleet, a: Node) -> str:
    work = fleet.work
    spawned = cp.spawn(example_agent(work), work, "#chunks=2 hi", placement=Placement(node="a"))
    assert spawned.command is not None
    assert cp.wait(spawned.command.id, 60).ok
    session_id = spawned.session.id
    assert cp.get(session_id).owner == a.owner
    return session_id


class _Follower:
    """A session watch of node b, taken on its own thread: every event and when it came."""

    def __init__(self, cp: ControlPlane, session_id: str) -> None:
        self.events: list[tuple[float, CommittedEvent]] = []
        self._wake = threading.Event()
        self._done = threading.Event()
        self.watch = cp._store.watch.session(session_id, self._wake.set)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            # No timeout of its own to poll with: only a wake-up (a notification, here)
            # brings another node's commits.
            self._wake.wait(0.05)
            self._wake.clear()
            taken = self.watch.take()
            now = time.time()
            self.events.extend((now, e) for e in taken.events)

    def last_seq(self) -> int:
        return self.events[-1][1].seq if self.events else 0

    def close(self) -> None:
        self._done.set()
        self._thread.join(5)
        self.watch.close()


@pytest.mark.backend_specific
@pytest.mark.timeout(180)
def test_only_the_owner_hears_a_sessions_work_and_nobody_hears_its_unwatched_stream(
    fleet: Fleet,
) -> None:
    a = fleet.start("a", discover_s=SLOW_DISCOVERY_S)
    c = fleet.start("c", discover_s=SLOW_DISCOVERY_S)
    prompts = 5
    waits = []
    with _this_node(fleet) as (cp, b):
        session_id = _placed_on_a(cp, fleet, a)
        time.sleep(0.5)  # the first turn's last notifications delivered
        before = {"a": _counts(a), "b": dict(b.counts), "c": _counts(c)}
        for i in range(prompts):
            command = cp.prompt(session_id, f"#chunks=10 #delay=20 p{i}")
            assert cp.wait(command.id, 30).ok
            record = cp.command(command.id)
            assert record.started_ts is not None
            waits.append(record.started_ts - record.created_ts)
        time.sleep(1.0)  # anything still on its way arrives
        heard = {
            "a": _delta(_counts(a), before["a"]),
            "b": _delta(dict(b.counts), before["b"]),
            "c": _delta(_counts(c), before["c"]),
        }
    print("delivered while 5 prompts streamed:", heard, "enqueue to start:", waits)
    nothing = {"work": 0, "unowned": 0, "session": 0, "own": 0}
    assert heard["c"] == nothing  # neither owns nor watches: not one notification
    assert heard["b"] == nothing  # wrote the prompts, watches nothing
    # The owner: each prompt once, on its own channel; its stream went to nobody.
    assert heard["a"] == {**nothing, "work": prompts}
    assert max(waits) < 10  # far below the 60 s discovery: the notification woke it


@pytest.mark.timeout(180)
def test_a_watcher_on_another_node_follows_the_stream_live_and_only_while_watching(
    fleet: Fleet,
) -> None:
    a = fleet.start("a", discover_s=SLOW_DISCOVERY_S)
    c = fleet.start("c", discover_s=SLOW_DISCOVERY_S)
    with _this_node(fleet) as (cp, b):
        session_id = _placed_on_a(cp, fleet, a)
        c_before = _counts(c)
        follower = _Follower(cp, session_id)
        try:
            eventually(lambda: session_id in b.listening(), 10, "b listening to the session")
            heard_before = b.counts["session"]
            command = cp.prompt(session_id, "#chunks=20 #delay=100 live")  # about 2 s
            assert cp.wait(command.id, 60).ok
            finished = cp.command(command.id).finished_ts
            assert finished is not None
            last = cp.events(session_id)[-1].seq
            eventually(lambda: follower.last_seq() == last, 10, "the watch has the turn")
            mine = [(at, e) for at, e in follower.events if e.command_id == command.id]
            seqs = [e.seq for _, e in mine]
            assert seqs == sorted(set(seqs)) and len(seqs) >= 20
            # Live: most of the turn reached this node while it still ran on node a.
            during = [at for at, _ in mine if at < finished]
            assert len(during) >= len(mine) // 2, (len(during), len(mine))
            assert b.counts["session"] - heard_before >= 5
        finally:
            follower.close()
        eventually(lambda: session_id not in b.listening(), 10, "b stops listening")
        time.sleep(0.3)
        after_close = dict(b.counts)
        command = cp.prompt(session_id, "#chunks=10 #delay=20 unwatched")
        assert cp.wait(command.id, 30).ok
        time.sleep(1.0)
        assert b.counts == after_close  # watched no more: its stream goes to nobody here
    c_heard = _delta(_counts(c), c_before)
    assert c_heard == {"work": 0, "unowned": 0, "session": 0, "own": 0}


@pytest.mark.timeout(180)
def test_a_listener_whose_connection_is_killed_listens_again_and_catches_up(
    fleet: Fleet,
) -> None:
    a = fleet.start("a", discover_s=SLOW_DISCOVERY_S)
    with _this_node(fleet) as (cp, b):
        session_id = _placed_on_a(cp, fleet, a)
        follower = _Follower(cp, session_id)
        try:
            eventually(lambda: session_id in b.listening(), 10, "b listening to the session")
            killed = b.backend_pid
            command = cp.prompt(session_id, "#chunks=30 #delay=50 across")
            eventually(lambda: follower.last_seq() > 0, 30, "the stream reaching b")
            with psycopg.connect(fleet.db, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (killed,))
            assert cp.wait(command.id, 60).ok
            eventually(lambda: b.reconnects == 1, 30, "b's listener reconnected")
            assert b.backend_pid != killed
            assert session_id in b.listening()  # listened to again
            eventually(lambda: b.holds_lock, 30, "b's listener lock taken again")
            last = cp.events(session_id)[-1].seq
            eventually(lambda: follower.last_seq() == last, 10, "the watch caught up")
            seqs = [e.seq for _, e in follower.events]
            assert seqs == list(range(seqs[0], last + 1))  # no gap, no repeat
            # And the session is followed live again: the next turn arrives too.
            again = cp.prompt(session_id, "#chunks=5 #delay=20 again")
            assert cp.wait(again.id, 30).ok
            last = cp.events(session_id)[-1].seq
            eventually(lambda: follower.last_seq() == last, 10, "the next turn followed")
        finally:
            follower.close()
