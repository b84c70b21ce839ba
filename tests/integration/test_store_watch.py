"""``Store.watch``: a waiter gets the committed data itself, never a bare "this changed" to
read back. A real store each time, on each backend; the session mailboxes' own tests (a slow
watcher, a watcher that falls behind) are in test_session_feed.py."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest

from state_machines import CommandState
from store import AsyncReader, EventRecord, NewEvent, Store
from tests.support.spawned import spawned_session

# The PostgreSQL variants stay in the default run: SQLite polls its file,
# PostgreSQL listens for notifications.
pytestmark = pytest.mark.backend_specific


@contextmanager
def counted_reads(store: Store) -> Iterator[list[int]]:
    """How many reads the store does inside the block (any thread)."""
    count = [0]
    read, read_raw = store.read, store.read_raw

    def counting(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            return fn(*args, **kwargs)

        return wrapper

    store.read = counting(read)  # type: ignore[method-assign]
    store.read_raw = counting(read_raw)  # type: ignore[method-assign]
    try:
        yield count
    finally:
        store.read, store.read_raw = read, read_raw  # type: ignore[method-assign]


def test_a_command_waiter_gets_the_finished_record_from_the_commit_without_a_read(
    store: Store, tmp_path: Path
) -> None:
    sid, cid = spawned_session(store, tmp_path)
    store.claim_next(sid)
    with store.watch.command(cid) as finished:
        assert finished.result(0.05) is None  # running: nothing yet
        done = threading.Thread(target=store.complete, args=(cid, {"stopReason": "end_turn"}))
        with counted_reads(store) as reads:
            done.start()
            record = finished.result(10.0)
            done.join()
        assert reads[0] == 0
    assert record is not None
    assert (record.id, record.state, record.result) == (
        cid,
        CommandState.COMPLETED,
        {"stopReason": "end_turn"},
    )
    assert record == store.get_command(cid)  # the same record the log holds


def test_an_async_command_wait_that_times_out_stays_open_for_the_next_await(
    store: Store, tmp_path: Path
) -> None:
    sid, cid = spawned_session(store, tmp_path)
    store.claim_next(sid)

    async def wait_twice() -> tuple[object, object]:
        with store.watch.command(cid) as finished:
            first = await finished.result_async(0.05)  # times out: must not cancel the wait
            loop = asyncio.get_running_loop()
            loop.call_later(0.05, store.complete, cid, {"stopReason": "end_turn"})
            second = await finished.result_async(10.0)
            return first, second

    first, second = asyncio.run(wait_twice())
    assert first is None
    assert second is not None and getattr(second, "state", None) is CommandState.COMPLETED


def test_a_closed_command_wait_is_forgotten(store: Store, tmp_path: Path) -> None:
    """A wait that ended is not kept by the store (nor resolved later by the commit)."""
    sid, cid = spawned_session(store, tmp_path)
    store.claim_next(sid)
    wait = store.watch.command(cid)
    wait.close()
    store.complete(cid, {"stopReason": "end_turn"})
    assert wait.result(0.05) is None


def test_an_async_follower_is_woken_by_its_own_session_only(store: Store, tmp_path: Path) -> None:
    """``AsyncControlPlane.follow``'s tail reads the log when its session commits, not after
    every commit of every session."""
    sid, _ = spawned_session(store, tmp_path)
    other, _ = spawned_session(store, tmp_path)
    reader = AsyncReader(store.location)

    async def follow() -> tuple[list[int], int]:
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def woken() -> None:  # the writer thread
            loop.call_soon_threadsafe(wake.set)

        watch = store.watch.session(sid, woken, finished=False)
        reads = [0]
        events_after = reader.events_after

        async def counting(*args: Any, **kwargs: Any) -> Any:
            reads[0] += 1
            return await events_after(*args, **kwargs)

        reader.events_after = counting  # type: ignore[method-assign]
        seen: list[int] = []
        tail = cast(
            AsyncGenerator[EventRecord, None],
            reader.tail(sid, 0, wake=wake, before_read=watch.discard),
        )
        try:
            seen.append((await anext(tail)).seq)  # session_created
            before = reads[0]
            # 40 commits of another session while the follower waits: none may wake it.
            await asyncio.to_thread(
                lambda: [
                    store.append_events(other, None, [NewEvent("note", {"n": n})])
                    for n in range(40)
                ]
            )
            await asyncio.to_thread(store.append_events, sid, None, [NewEvent("note", {})])
            seen.append((await asyncio.wait_for(anext(tail), 10.0)).seq)
            return seen, reads[0] - before
        finally:
            await tail.aclose()
            watch.close()
            await reader.aclose()

    seen, reads = asyncio.run(follow())
    assert seen == [1, 2]
    # The read that found nothing, then the one its own commit woke (a slow fallback read
    # every 0.5 s may add one or two on a loaded machine): far from one per commit (41).
    assert reads <= 5
