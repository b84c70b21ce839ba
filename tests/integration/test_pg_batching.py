"""PostgreSQL: the writer's statements whose answer it does not read (``BEGIN``, savepoints,
their releases, the notifications) are held and go out in one message with what follows
them (store/raw.py ``later``). Counted from libpq's own protocol trace (bench/pg_trace.py):
a group takes fewer round trips than statements, and fewer than with batching off; a
serialization failure in a batched message is retried like any other; a failing write in
a group is still undone alone."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

import store.raw
from bench.pg_trace import Trace, count, traced_writer
from store import NewEvent, Store, ops
from store.writer import WriteContext
from tests.conftest import AGENT

pytestmark = [
    pytest.mark.backend_specific,
    pytest.mark.parametrize("db", ["postgresql"], indirect=True),
]

SESSIONS = 6


@pytest.fixture(params=[True, False], ids=["batch", "one-by-one"])
def batch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    monkeypatch.setattr(store.raw, "BATCH", request.param)
    yield request.param


def _group(db: str, tmp_path: Path, tag: str) -> tuple[Trace, list[int]]:
    """One group of ``SESSIONS`` appends (each to its own session) behind a write that
    holds the writer, traced; and the number of events each session has afterwards."""
    with Store.open(db) as st:
        sids = [st.spawn(AGENT, "/w", None, None, f"{tag}{i}").session.id for i in range(SESSIONS)]
        gate = threading.Event()
        path = str(tmp_path / "trace.txt")
        with traced_writer(st, path):
            blocker = st.submit(lambda ctx: gate.wait(10))

            def append(sid: str) -> Callable[[WriteContext], object]:
                return lambda ctx: ops.append_events(ctx, sid, None, [NewEvent("note", {})])

            writes = [st.submit(append(sid)) for sid in sids]
            gate.set()
            blocker.result(10)
            for write in writes:
                write.result(10)
        return count(path), [[e.kind for e in st.events(sid)].count("note") for sid in sids]


def test_a_group_sends_what_it_does_not_read_with_what_it_does(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store.raw, "BATCH", False)
    alone, events_alone = _group(db, tmp_path, "alone")
    monkeypatch.setattr(store.raw, "BATCH", True)
    piped, events_piped = _group(db, tmp_path, "piped")
    assert events_alone == events_piped == [1] * SESSIONS
    assert alone.statements == piped.statements  # the same statements, in fewer trips
    assert alone.round_trips >= alone.statements
    # Every append's notification goes in one message with the COMMIT.
    assert piped.round_trips <= alone.round_trips - SESSIONS


def test_a_serialization_failure_in_a_batch_is_retried(db: str, batch: bool) -> None:
    """Write skew: this store's write reads two rows and updates one; meanwhile another
    connection reads both and updates the other, and commits. The first attempt fails
    (serializable isolation) where its statements were sent, the group runs again and
    commits."""
    with Store.open(db) as st:
        a, b = (st.spawn(AGENT, "/w", None, None, k).session.id for k in ("a", "b"))
        attempts: list[int] = []
        read_both = "SELECT count(*) FROM sessions WHERE id IN (?, ?) AND metadata = '{}'"

        def skewed(ctx: WriteContext) -> int:
            attempts.append(1)
            seen = int(ctx.raw.execute(read_both, (a, b)).fetchone()[0])
            if len(attempts) == 1:
                other = psycopg.connect(db, autocommit=True)
                with other, other.transaction():
                    other.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
                    other.execute(read_both.replace("?", "%s"), (a, b)).fetchone()
                    other.execute(
                        'UPDATE sessions SET metadata = \'{"by": "other"}\' WHERE id = %s', (b,)
                    )
            ctx.raw.execute('UPDATE sessions SET metadata = \'{"by": "me"}\' WHERE id = ?', (a,))
            ops.append_events(ctx, a, None, [NewEvent("note", {})])  # a held notification
            return seen

        assert st.write(skewed) == 1  # the second attempt saw the other's update
        assert len(attempts) == 2
        assert st.get_session(a).metadata == {"by": "me"}
        assert st.get_session(b).metadata == {"by": "other"}


def test_a_failing_write_after_held_statements_is_undone_alone(db: str, batch: bool) -> None:
    with Store.open(db) as st:
        sid = st.spawn(AGENT, "/w", None, None, "k").session.id
        gate = threading.Event()
        blocker = st.submit(lambda ctx: gate.wait(10))

        def good(ctx: WriteContext) -> object:
            return ops.append_events(ctx, sid, None, [NewEvent("note", {})])

        def bad(ctx: WriteContext) -> None:
            ops.append_events(ctx, sid, None, [NewEvent("note", {})])
            ctx.raw.execute("INSERT INTO store_identity (id, created_at) VALUES ('x', 0)")
            ctx.raw.execute("INSERT INTO store_identity (id, created_at) VALUES ('x', 0)")

        first, failing, last = st.submit(good), st.submit(bad), st.submit(good)
        gate.set()
        blocker.result(10)
        assert first.result(10) and last.result(10)
        with pytest.raises(psycopg.errors.UniqueViolation):
            failing.result(10)
        assert [e.kind for e in st.events(sid)].count("note") == 2
        identities = st.read(lambda c: c.exec_driver_sql("SELECT id FROM store_identity").all())
        assert ("x",) not in [tuple(r) for r in identities]
