"""No session stays owned by a process that is gone, nor by one whose release the store
refused for a moment.

- Process A (``tests/support/idle_owner_driver.py``) owns idle sessions (their turns over, no
  work queued); this test process is B on the same store. While A lives, B leaves them. After a
  kill -9 of A, B's sweep gives them up within a discovery, with no prompt sent: no owner, the
  epoch raised, nothing run; B's next prompt to one runs it in B.
- The store op itself on both backends: which owners are gone (a process gone from this host;
  on PostgreSQL also a lease run out), what a dead owner left mid-turn, and closed sessions.
- A release refused at an actor's stop (the store's lock held elsewhere past lock_timeout) is
  retried off the actor's thread, and lands once the lock is gone.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from actors.session.release import PendingReleases
from control_plane import CommandState, ControlPlane, SessionState, StoreOptions
from store import CommandKind, Store, ops
from store.location import Backend
from store.ops import nodes
from store.ops.nodes import NodeSpec
from store.ops.recovery import release_dead_owners
from store.ownership import this_owner
from tests.conftest import AGENT, eventually
from tests.support.cp_harness import FAST, noop_agent, open_cp
from tests.support.direct_sql import execute, is_postgres

pytestmark = pytest.mark.timeout(120)

# Given up within one discovery (0.5 s in FAST) and a sweep; the rest is slack for a
# 2-core machine shared with other test runs. The time it took is printed.
BOUND_S = 15.0


class _IdleOwner:
    """Process A, with the ``key value`` lines it printed."""

    def __init__(self, work: Path, db: str, count: int) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.log = work / "owner-a.log"
        argv = [sys.executable, "-m", "tests.support.idle_owner_driver", str(work), db, str(count)]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def lines(self) -> list[tuple[str, str]]:
        text = self.log.read_text(errors="replace")
        return [(k, v) for k, _, v in (line.partition(" ") for line in text.splitlines())]

    def wait_idle(self, timeout: float = 90.0) -> tuple[str, list[str]]:
        """A's owner id and its sessions, once all of them are idle."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = self.lines()
            if ("idle", "") in seen:
                owner = next(v for k, v in seen if k == "owner")
                return owner, [v for k, v in seen if k == "session"]
            assert self.proc.poll() is None, self.log.read_text()
            time.sleep(0.05)
        raise AssertionError(f"process A never went idle: {self.log.read_text()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)


def test_a_killed_owners_idle_sessions_lose_it_within_a_discovery_without_a_prompt(
    db: str, tmp_path: Path
) -> None:
    a = _IdleOwner(tmp_path / "a", db, 3)
    try:
        owner_a, sids = a.wait_idle()
        (tmp_path / "b").mkdir()
        with open_cp(tmp_path / "b", db=db) as b:
            before = {sid: b.get(sid) for sid in sids}
            assert {s.owner for s in before.values()} == {owner_a}
            assert {s.state for s in before.values()} == {SessionState.IDLE}
            # While A lives, B's sweep leaves its sessions (the same call the sweep makes).
            assert b._supervisor.lease.release_dead_owners().sessions == ()
            assert {b.get(sid).owner for sid in sids} == {owner_a}

            a.kill()
            killed_at = time.monotonic()
            eventually(
                lambda: all(b.get(sid).owner is None for sid in sids),
                BOUND_S,
                "the killed owner's idle sessions unowned",
            )
            print(f"given up {time.monotonic() - killed_at:.2f} s after the kill -9")
            for sid in sids:
                after = b.get(sid)
                assert after.epoch == before[sid].epoch + 1  # fenced, as a takeover fences
                assert after.state is SessionState.IDLE  # idle: nothing to recover
                assert [c.state for c in b.commands(sid)] == [CommandState.COMPLETED]
            assert b.live_sessions() == [] and b._supervisor.activations == 0

            # Any process takes one with its next work: here B.
            command = b.prompt(sids[0], "again")
            assert b.wait(command.id, 60).state is CommandState.COMPLETED
            assert b.get(sids[0]).owner == this_owner()
            assert b.get(sids[0]).epoch == before[sids[0]].epoch + 2
    finally:
        a.kill()


# -- the store op ------------------------------------------------------------------------


def _owned(store: Store, owner: str, key: str) -> str:
    sid = store.spawn(AGENT, "/w", None, None, key).session.id
    store.write(lambda ctx: ops.acquire(ctx, sid, owner))
    return sid


@pytest.mark.backend_specific  # who is gone: /proc on SQLite, leases too on PostgreSQL
def test_the_op_gives_up_every_session_of_a_gone_owner_and_no_other(db: str) -> None:
    host = socket.gethostname()
    gone = f"{host}:{os.getpid()}:1"  # this pid, another start time: a process gone
    alive = this_owner()  # a live process on this host (this one)
    expired = "elsewhere:1:1"  # on another host; its lease ran out
    leased = "elsewhere:2:2"  # on another host; its lease runs
    with Store.open(db) as store:
        store.write(lambda ctx: nodes.register(ctx, NodeSpec(expired, "x", (), 1), 0.001))
        store.write(lambda ctx: nodes.register(ctx, NodeSpec(leased, "y", (), 1), 600))
        idle_gone = _owned(store, gone, "idle-gone")
        mid_turn = _owned(store, gone, "mid-turn")
        running = store.enqueue(mid_turn, CommandKind.PROMPT, {"content": []}).command.id
        execute(db, "UPDATE sessions SET state = 'running' WHERE id = ?", (mid_turn,))
        execute(db, "UPDATE commands SET state = 'running', attempts = 1 WHERE id = ?", (running,))
        closed = _owned(store, gone, "closed")
        store.close_session(closed)
        of_alive = _owned(store, alive, "alive")
        of_expired = _owned(store, expired, "expired")
        of_leased = _owned(store, leased, "leased")
        epochs = {sid: store.get_session(sid).epoch for sid in store_ids(store)}

        done = store.write(lambda ctx: release_dead_owners(ctx, "me"))

        released = {idle_gone, mid_turn, closed}
        if store.backend is Backend.POSTGRESQL:
            released.add(of_expired)  # the lease decides for another host
        assert set(done.sessions) == released
        assert set(done.owners) == {gone} | ({expired} if of_expired in released else set())
        for sid in released:
            assert store.get_session(sid).owner is None
            assert store.get_session(sid).epoch == epochs[sid] + 1
        kept = {of_alive: alive, of_expired: expired, of_leased: leased}
        for sid, owner in kept.items():
            if sid not in released:
                assert store.get_session(sid).owner == owner
                assert store.get_session(sid).epoch == epochs[sid]
        # What the dead owner left mid-turn is recovered with it.
        assert done.recovery.requeued == (running,)
        assert done.recovery.sessions_to_error == (mid_turn,)
        assert store.get_session(mid_turn).state is SessionState.ERROR
        assert store.get_session(idle_gone).state is SessionState.CREATING  # untouched
        # Nothing is left to give up.
        assert store.write(lambda ctx: release_dead_owners(ctx, "me")).sessions == ()


def store_ids(store: Store) -> list[str]:
    return [s.id for s in store.list_sessions()]


# -- a release refused at an actor's stop ------------------------------------------------

HOLD_SQLITE_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


@contextmanager
def _lock_held(db: str, session_id: str, seconds: float) -> Iterator[None]:
    """The store's write lock (SQLite: the file's, from another process) or the session's
    row (PostgreSQL: ``FOR UPDATE`` in another connection's open transaction) held for
    ``seconds``; the block runs while it is held."""
    if is_postgres(db):
        with psycopg.connect(db) as conn:
            conn.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (session_id,))
            timer = threading.Timer(seconds, conn.commit)
            timer.start()
            try:
                yield
            finally:
                timer.join()
        return
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_SQLITE_LOCK, db, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.wait(60)


def test_a_release_the_store_refuses_at_passivation_is_retried_off_the_actor(
    db: str, tmp_path: Path
) -> None:
    settings = replace(FAST, log_dir=str(tmp_path / "logs"), passivate_after_s=1.0)
    with ControlPlane.open(db, StoreOptions(lock_timeout_s=0.5), settings) as cp:
        spawned = cp.spawn(noop_agent(), tmp_path, "hello", idempotency_key="r")
        sid = spawned.session.id
        assert spawned.command is not None
        assert cp.wait(spawned.command.id, 60).state is CommandState.COMPLETED
        assert cp.get(sid).owner == this_owner()
        supervisor = cp._supervisor
        releases = supervisor._deps.releases
        with _lock_held(db, sid, 6.0):
            # The actor passivates while the lock is held: its release is refused, and its
            # stop goes on (the actor is gone) with the release left to the retries.
            eventually(lambda: releases.pending() == [sid], 10, "the release refused")
            eventually(lambda: sid not in supervisor._actors, 10, "the actor's stop over")
            assert cp.get(sid).owner == this_owner()  # still ours: the retry has not landed
        eventually(lambda: cp.get(sid).owner is None, 20, "the release retried")
        # The retry forgets the release once its write returns, a moment after the commit
        # that a reader sees.
        eventually(lambda: releases.pending() == [], 10, "the retry done")
        assert releases.retried == 1
        # The session runs again (a new actor, a higher epoch).
        command = cp.prompt(sid, "again")
        assert cp.wait(command.id, 60).state is CommandState.COMPLETED


def test_refused_releases_are_retried_together_and_given_up_past_their_patience(
    tmp_path: Path,
) -> None:
    """Several releases refused at once land in one retry; a release the store refuses for
    longer than its patience is given up (the session stays with this live process, as
    before the retries), and the retrying thread ends."""
    db = str(tmp_path / "cp.db")
    with Store.open(db, StoreOptions(lock_timeout_s=0.2)) as store:
        sids = [_owned(store, this_owner(), f"s{i}") for i in range(3)]
        epochs = {sid: store.get_session(sid).epoch for sid in sids}
        together, impatient = PendingReleases(), PendingReleases(patience_s=0.5)
        stopping = threading.Event()
        with _lock_held(db, sids[0], 3.0):
            for sid in sids[:2]:
                together.release(store, sid, epochs[sid], stopping)
            impatient.release(store, sids[2], epochs[sids[2]], stopping)
            assert together.pending() == sorted(sids[:2])
            eventually(lambda: impatient.pending() == [], 10, "the impatient release given up")
        eventually(lambda: together.pending() == [], 20, "the releases retried")
        assert together.retried == 2 and impatient.retried == 0
        assert [store.get_session(sid).owner for sid in sids] == [None, None, this_owner()]
        eventually(
            lambda: together._thread is None and impatient._thread is None, 10, "threads ended"
        )
