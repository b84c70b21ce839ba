"""A node that stands still past its lease (SIGSTOP: alive on this host, so only the lease
can tell) loses its idle sessions to the others' sweep with no prompt sent: no owner, the
epoch raised. Woken, it finds its lease gone and fences itself, and its late releases change
nothing; the next prompt runs the session on a node."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest

from control_plane import CommandState, ControlPlane
from tests.conftest import eventually
from tests.nodes.conftest import DISCOVER_S, LEASE_S, Fleet
from tests.support.cp_harness import FAST, noop_agent

# The lease, one discovery, and slack for a 2-core machine shared with other fleets.
BOUND_S = LEASE_S + DISCOVER_S + 20.0


@contextmanager
def _client(fleet: Fleet) -> Iterator[ControlPlane]:
    """A control plane that runs nothing: how a host submits work and reads the store."""
    settings = replace(FAST, log_dir=str(fleet.work / "logs-client"))
    with ControlPlane.open(fleet.db, settings=settings, run_sessions=False) as cp:
        yield cp


@pytest.mark.timeout(180)
def test_a_node_stopped_past_its_lease_loses_its_idle_sessions_without_a_prompt(
    fleet: Fleet,
) -> None:
    a = fleet.start("a")
    with _client(fleet) as cp:
        sids = []
        for i in range(2):
            spawned = cp.spawn(noop_agent(), fleet.work, f"hi {i}", idempotency_key=f"s{i}")
            assert spawned.command is not None
            assert cp.wait(spawned.command.id, 90).state is CommandState.COMPLETED
            sids.append(spawned.session.id)
        before = {sid: cp.get(sid) for sid in sids}
        assert {s.owner for s in before.values()} == {a.owner}  # idle, and still a's
        fleet.start("b")
        os.kill(a.proc.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            eventually(
                lambda: all(cp.get(sid).owner is None for sid in sids),
                BOUND_S,
                "a's idle sessions unowned",
            )
            took = time.monotonic() - stopped_at
            print(f"given up {took:.2f} s after the SIGSTOP (lease {LEASE_S} s)")
            # Its process lives: only its lease, renewed every lease_s / 3, can have run out.
            assert took >= LEASE_S / 2
            for sid in sids:
                after = cp.get(sid)
                assert after.epoch == before[sid].epoch + 1
                assert [c.state for c in cp.commands(sid)] == [CommandState.COMPLETED]
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        eventually(lambda: "lease had run out" in a.log_text(), 30, "a saw its lease lost")
        # a's actors stopped with its fence; their releases, at the old epoch, change nothing.
        assert "stopping all 2 sessions here" in a.log_text(), a.log_text()
        assert {cp.get(sid).owner for sid in sids} == {None}
        again = cp.prompt(sids[0], "again")
        assert cp.wait(again.id, 90).state is CommandState.COMPLETED
        assert cp.get(sids[0]).owner is not None
        assert a.proc.poll() is None, "a lives on, as a node without these sessions"
