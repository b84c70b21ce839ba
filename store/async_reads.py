"""Read access for asyncio callers through SQLAlchemy's asyncio extension (``aiosqlite``, or
psycopg 3 for PostgreSQL).

Only reads: measured here, the async write path managed 400-600 single-row transactions/s,
far below the group-commit writer. Tailing a session's log polls after the last seen seq;
pass ``wake`` (an ``asyncio.Event`` set from a store subscription) to poll at once on append.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from state_machines import SessionNotFound, SessionState
from state_machines.event_kinds import EventKind
from store import queries
from store.driver_errors import damage_as_store_error
from store.engine import async_url
from store.location import Backend, StoreLocation, locate
from store.records import EventRecord, SessionRecord
from store.rows import event_from_row, session_from_row
from store.schema import sessions


class AsyncReader:
    """Reads on an asyncio loop, from a SQLite file (aiosqlite) or PostgreSQL (psycopg's
    async connection)."""

    def __init__(self, location: str | StoreLocation, busy_timeout_ms: int = 1000) -> None:
        where = locate(location) if isinstance(location, str) else location
        self._path = where.display
        if where.backend is Backend.POSTGRESQL:
            self._engine: AsyncEngine = create_async_engine(where.target, pool_pre_ping=True)
            return
        self._engine = create_async_engine(async_url(where.target))

        @event.listens_for(self._engine.sync_engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cur.close()

    async def aclose(self) -> None:
        await self._engine.dispose()

    async def list_sessions(
        self, state: SessionState | None = None, limit: int = 100, after_id: str | None = None
    ) -> list[SessionRecord]:
        with damage_as_store_error(self._path):
            async with self._engine.connect() as conn:
                query = queries.sessions_query(state, None, after_id).limit(limit)
                result = await conn.execute(query)
                return [session_from_row(r) for r in result]

    async def events_after(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        with damage_as_store_error(self._path):
            async with self._engine.connect() as conn:
                result = await conn.execute(queries.events_query(session_id, after_seq, limit))
                return [event_from_row(r) for r in result]

    async def _session_exists(self, session_id: str) -> bool:
        with damage_as_store_error(self._path):
            async with self._engine.connect() as conn:
                query = sessions.select().where(sessions.c.id == session_id)
                result = await conn.execute(query)
                return result.first() is not None

    async def tail(
        self,
        session_id: str,
        after_seq: int = 0,
        poll_interval_s: float = 0.05,
        wake: asyncio.Event | None = None,
        stop_after_close: bool = True,
        before_read: Callable[[], None] | None = None,
    ) -> AsyncIterator[EventRecord]:
        """Yield the session's events after ``after_seq`` as they are committed, in order.
        Ends after the ``closed`` event when ``stop_after_close``. ``wake`` (set by a commit
        of the session) cuts the wait between empty reads short; ``before_read`` runs before
        each read (a session watch's ``discard``, so that its next commit wakes again)."""
        if not await self._session_exists(session_id):
            raise SessionNotFound(session_id)
        last = after_seq
        while True:
            if wake is not None:
                wake.clear()  # before the read: a commit after it sets it again
            if before_read is not None:
                before_read()
            batch = await self.events_after(session_id, last, limit=500)
            for ev in batch:
                last = ev.seq
                yield ev
                if stop_after_close and ev.kind == EventKind.CLOSED:
                    return
            if batch:
                continue
            if wake is None:
                await asyncio.sleep(poll_interval_s)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), poll_interval_s * 10)
