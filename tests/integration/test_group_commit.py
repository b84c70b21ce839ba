"""The group-commit writer's acknowledgements, on a real store of each backend: a blocking
``write`` returns the write's value or raises its error only after the commit, a failing
write is undone alone, concurrent writes share transactions, a timed-out wait still commits,
and a closed store refuses writes with a typed error."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from state_machines import IdempotencyConflict, StoreError
from store import CommandKind, EnqueueResult, Store, ops
from store.writer import WriteContext
from tests.conftest import AGENT

# The PostgreSQL variants stay in the default run: the group commit is each
# backend's transaction.
pytestmark = pytest.mark.backend_specific

PAYLOAD = {"content": [{"type": "text", "text": "hello"}]}


def _spawn(store: Store, key: str = "s") -> str:
    return store.spawn(AGENT, "/tmp", None, None, key).session.id


def test_write_returns_after_commit_and_raises_the_writes_own_error(db: str) -> None:
    with Store.open(db) as store:
        sid = _spawn(store)
        queued = store.enqueue(sid, CommandKind.PROMPT, PAYLOAD, "k").command
        # Committed before the call returned: a separate reader connection sees it.
        assert store.get_command(queued.id).seq == queued.seq
        with pytest.raises(IdempotencyConflict):
            store.enqueue(sid, CommandKind.PROMPT, {"content": []}, "k")
        assert [c.id for c in store.commands_of(sid)] == [queued.id]


def test_a_failing_write_in_a_group_is_undone_alone(db: str) -> None:
    with Store.open(db) as store:
        sid = _spawn(store)
        gate = threading.Event()

        def blocker(ctx: WriteContext) -> None:
            gate.wait(5)  # holds the writer so the next writes queue up as one group

        def failing(ctx: WriteContext) -> None:
            ops.enqueue(ctx, sid, CommandKind.PROMPT, PAYLOAD, "doomed")
            raise ValueError("this write fails after writing")

        def enqueue_k(i: int) -> Callable[[WriteContext], EnqueueResult]:
            def write(ctx: WriteContext) -> EnqueueResult:
                return ops.enqueue(ctx, sid, CommandKind.PROMPT, PAYLOAD, f"k{i}")

            return write

        first = store.submit(blocker)
        good = [store.submit(enqueue_k(i)) for i in range(5)]
        bad = store.submit(failing)
        gate.set()
        first.result(5)
        assert [f.result(5).command.idempotency_key for f in good] == [f"k{i}" for i in range(5)]
        with pytest.raises(ValueError, match="fails after writing"):
            bad.result(5)
        keys = [c.idempotency_key for c in store.commands_of(sid)]
        assert keys == [f"k{i}" for i in range(5)]


def test_concurrent_blocking_writes_share_transactions(db: str) -> None:
    with Store.open(db) as store:
        sessions = [_spawn(store, f"s{i}") for i in range(16)]
        before = store.commit_stats
        barrier = threading.Barrier(len(sessions))
        errors: list[BaseException] = []

        def submitter(sid: str) -> None:
            try:
                barrier.wait(5)
                for i in range(20):
                    store.enqueue(sid, CommandKind.PROMPT, PAYLOAD, f"k{i}")
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=submitter, args=(sid,)) for sid in sessions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not errors
        batches, writes = (a - b for a, b in zip(store.commit_stats, before, strict=True))
        assert writes == 16 * 20
        assert batches < writes  # grouped: fewer transactions than writes
        for sid in sessions:
            assert [c.seq for c in store.commands_of(sid)] == list(range(1, 21))


def test_a_timed_out_wait_raises_but_the_write_still_commits(db: str) -> None:
    with Store.open(db) as store:
        sid = _spawn(store)
        gate = threading.Event()
        held = store.submit(lambda ctx: gate.wait(5))
        with pytest.raises(TimeoutError):
            store.write(
                lambda ctx: ops.enqueue(ctx, sid, CommandKind.PROMPT, PAYLOAD, "late"), timeout=0.2
            )
        gate.set()
        held.result(5)
        store.write(lambda ctx: None)  # every earlier write has committed after this one
        assert [c.idempotency_key for c in store.commands_of(sid)] == ["late"]


def test_a_closed_store_refuses_writes(db: str) -> None:
    store = Store.open(db)
    sid = _spawn(store)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.enqueue(sid, CommandKind.PROMPT, PAYLOAD, "k")


def test_blocking_writers_in_one_group_each_get_their_own_outcome(db: str) -> None:
    """The lock path (``write``, not ``submit``): with a write of the group failing, the
    others commit and return their values; the failing caller gets its own exception."""
    with Store.open(db) as store:
        sid = _spawn(store)
        gate = threading.Event()
        held = store.submit(lambda ctx: gate.wait(5))  # the next writes queue as one group
        outcomes: dict[int, object] = {}

        def writer(i: int) -> None:
            def write(ctx: WriteContext) -> str:
                ops.enqueue(ctx, sid, CommandKind.PROMPT, PAYLOAD, f"k{i}")
                if i == 3:
                    raise ValueError("write 3 fails after writing")
                return f"ok {i}"

            try:
                outcomes[i] = store.write(write, timeout=10)
            except ValueError as exc:
                outcomes[i] = exc

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        time.sleep(0.2)  # let the writers queue behind the held write (else: smaller groups)
        gate.set()
        for thread in threads:
            thread.join(10)
        held.result(5)
        assert {i: v for i, v in outcomes.items() if i != 3} == {
            i: f"ok {i}" for i in range(6) if i != 3
        }
        assert isinstance(outcomes[3], ValueError)
        keys = sorted(c.idempotency_key or "" for c in store.commands_of(sid))
        assert keys == [f"k{i}" for i in range(6) if i != 3]
