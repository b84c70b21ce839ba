"""Claiming work for a node: ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, nothing on SQLite."""

from __future__ import annotations

import threading

import pytest

from store import CommandKind, Store
from store.location import Backend
from store.ops import claims, nodes
from store.ops.nodes import NodeSpec
from store.placement import Placement
from tests.conftest import AGENT

# The PostgreSQL variants stay in the default run: claims are each backend's
# conditional updates.
pytestmark = pytest.mark.backend_specific

PROMPT = {"content": [{"type": "text", "text": "go"}]}


def _sessions_with_work(store: Store, n: int, **spawn: object) -> list[str]:
    ids = []
    for i in range(n):
        sid = store.spawn(AGENT, "/w", None, None, f"k{i}-{spawn!r}", **spawn).session.id  # type: ignore[arg-type]
        store.enqueue(sid, CommandKind.PROMPT, PROMPT)
        ids.append(sid)
    return ids


def test_two_nodes_claiming_at_once_take_different_sessions(db: str) -> None:
    with Store.open(db) as one, Store.open(db) as two:
        ids = _sessions_with_work(one, 10)
        if one.backend is Backend.SQLITE:
            assert one.write(lambda ctx: claims.claim_sessions(ctx, "a", "a", (), 5)) == []
            return
        holding = threading.Event()
        release = threading.Event()

        def slow_claim(ctx: object) -> list[str]:
            taken = claims.claim_sessions(ctx, "node-a", "a", (), 5)  # type: ignore[arg-type]
            holding.set()
            release.wait(10)  # its row locks stay held until this transaction commits
            return taken

        first: list[str] = []
        thread = threading.Thread(target=lambda: first.extend(one.write(slow_claim)))
        thread.start()
        assert holding.wait(10)
        second = two.write(lambda ctx: claims.claim_sessions(ctx, "node-b", "b", (), 5))
        release.set()
        thread.join()
        assert len(first) == len(second) == 5
        assert not set(first) & set(second)
        assert set(first) | set(second) == set(ids)
        assert {one.get_session(s).owner for s in first} == {"node-a"}
        assert {one.get_session(s).owner for s in second} == {"node-b"}
        # Owned by live claimers (no lease rows: judged alive elsewhere): nothing is left.
        assert two.write(lambda ctx: claims.claim_sessions(ctx, "node-c", "c", (), 5)) == []


def test_a_claim_takes_only_what_placement_allows_and_from_expired_leases(db: str) -> None:
    with Store.open(db) as store:
        if store.backend is Backend.SQLITE:
            return  # nothing to claim on one machine (the test above checks that)
        pinned = _sessions_with_work(store, 2, placement=Placement(node="elsewhere"))
        free = _sessions_with_work(store, 2)
        gone = NodeSpec("dead-node", "dead", (), 4)
        store.write(lambda ctx: nodes.register(ctx, gone, 0.001))  # its lease ends at once
        taken = store.write(lambda ctx: claims.claim_sessions(ctx, "dead-node", "dead", (), 1))
        assert len(taken) == 1 and taken[0] in free
        got = store.write(lambda ctx: claims.claim_sessions(ctx, "live", "live", (), 10))
        # The session of the node whose lease ran out is taken too; the pinned ones are not.
        assert set(got) == set(free)
        assert not set(got) & set(pinned)
        assert all(store.get_session(s).epoch >= 1 for s in got)
