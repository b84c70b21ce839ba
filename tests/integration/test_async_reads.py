from __future__ import annotations

import asyncio
import threading
import time

import pytest

from state_machines import SessionNotFound
from store import AsyncReader, NewEvent, Store
from tests.conftest import AGENT

# The PostgreSQL variants stay in the default run: aiosqlite on SQLite,
# psycopg's async connections on PostgreSQL.
pytestmark = pytest.mark.backend_specific


def test_async_reader_lists_sessions_and_reads_events_after_a_seq(store: Store, db: str) -> None:
    a = store.spawn(AGENT, "/a", None, None, "a").session.id
    store.spawn(AGENT, "/b", None, None, "b")
    store.append_events(a, None, [NewEvent("x", {"n": i}) for i in range(5)])

    async def main() -> tuple[list[str], list[int]]:
        reader = AsyncReader(db)
        try:
            sessions = await reader.list_sessions()
            events = await reader.events_after(a, after_seq=3)
            return [s.cwd for s in sessions], [e.seq for e in events]
        finally:
            await reader.aclose()

    cwds, seqs = asyncio.run(main())
    assert cwds == ["/a", "/b"]
    assert seqs == [4, 5, 6]


def test_tail_follows_events_as_they_are_committed_until_close(store: Store, db: str) -> None:
    sid = store.spawn(AGENT, "/a", None, None, "a").session.id

    def writer() -> None:
        for i in range(20):
            store.append_events(sid, None, [NewEvent("tick", {"i": i})])
            time.sleep(0.005)
        store.close_session(sid)

    async def main() -> list[str]:
        reader = AsyncReader(db)
        thread = threading.Thread(target=writer)
        thread.start()
        seen = [ev.kind async for ev in reader.tail(sid, after_seq=1, poll_interval_s=0.01)]
        thread.join()
        await reader.aclose()
        return seen

    kinds = asyncio.run(asyncio.wait_for(main(), 20))
    assert kinds == ["tick"] * 20 + ["closed"]


def test_tail_of_unknown_session_raises(db: str, store: Store) -> None:
    async def main() -> None:
        reader = AsyncReader(db)
        try:
            async for _ in reader.tail("nope"):
                pass
        finally:
            await reader.aclose()

    with pytest.raises(SessionNotFound):
        asyncio.run(main())
