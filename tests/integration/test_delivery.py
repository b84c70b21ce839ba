from __future__ import annotations

import functools
import json
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from actors.delivery.announce import TRIGGERS
from actors.delivery.service import DeliveryService
from actors.delivery.sinks import JsonlFileSink, event_line
from state_machines.event_kinds import EventKind
from store import BindingRecord, BindingSpec, EventRecord, NewEvent, SinkKind, Store, ops
from tests.conftest import AGENT, eventually
from tests.support.direct_sql import is_postgres
from tests.support.postgres import PostgresServer

# The PostgreSQL variants stay in the default run: delivery checkpoints are
# each backend's compare-and-set.
pytestmark = pytest.mark.backend_specific


def _spawn_with(store: Store, spec: BindingSpec, key: str) -> tuple[str, str]:
    result = store.spawn(AGENT, "/w", spec, None, key)
    assert result.binding is not None
    return result.session.id, result.binding.id


def test_callback_sink_receives_every_event_in_order_and_checkpoint_follows(store: Store) -> None:
    received: list[int] = []
    delivery = DeliveryService(store)
    delivery.register_callback("collect", lambda e: received.append(e.seq))
    delivery.start()
    sid, bid = _spawn_with(store, BindingSpec(SinkKind.CALLBACK, "collect"), "a")
    for i in range(30):
        store.append_events(sid, None, [NewEvent("tick", {"i": i})])
    assert delivery.wait_idle(10)
    delivery.close()
    assert received == list(range(1, 32))
    binding = store.get_binding(bid)
    assert binding is not None and binding.last_delivered_seq == 31


def test_a_projector_right_behind_takes_each_commits_events_without_a_read(
    store: Store, tmp_path: Path
) -> None:
    """Once caught up, a binding is handed each commit's events as the commit holds them
    (both append paths: the recorder's frames and single events), and the file gets exactly
    what a read of the log would have given it: ids, seqs, times and payloads."""
    path = tmp_path / "out.jsonl"
    delivery = DeliveryService(store)
    delivery.start()
    sid, _ = _spawn_with(store, BindingSpec(SinkKind.JSONL, str(path)), "commits")
    store.append_events(sid, None, [NewEvent("first", {})])
    assert delivery.wait_idle(10)
    reads, taken = delivery.log_reads, delivery.from_commits
    for i in range(10):
        frames = [("session_update", json.dumps({"n": i, "k": k}), None) for k in range(3)]
        store.write(
            functools.partial(ops.append_frames, session_id=sid, command_id=None, new=frames)
        )
        assert delivery.wait_idle(10)
        store.append_events(sid, None, [NewEvent("tick", {"i": i})])
        assert delivery.wait_idle(10)
    delivery.close()
    assert delivery.from_commits - taken == 20
    assert delivery.log_reads == reads  # not one read while it kept up
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [event_line(e, store.identity) for e in store.events(sid)]
    assert [line["seq"] for line in lines] == list(range(1, 43))


def test_a_spawn_costs_delivery_no_lookup_no_read_and_no_write(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spawn's commit tells delivery the new session's bindings (most often none), and a
    parent binding's checkpoint starts past ``session_created`` (the announce sink acts only
    on a run's end): no lookup, no log read and no checkpoint commit follow a spawn, with or
    without a binding. The child's later events still reach the announce sink."""
    assert EventKind.SESSION_CREATED not in TRIGGERS  # what the checkpoint's start relies on
    delivery = DeliveryService(store)
    delivery.start()
    assert delivery.wait_idle(10)
    lookups: list[str] = []
    real_lookup = store.bindings_of

    def counted_lookup(session_id: str, **options: bool) -> list[BindingRecord]:
        lookups.append(session_id)
        return real_lookup(session_id, **options)

    monkeypatch.setattr(store, "bindings_of", counted_lookup)
    reads, (_, writes) = delivery.log_reads, store.commit_stats
    parent = store.spawn(AGENT, "/w", None, None, None).session
    store.append_events(parent.id, None, [NewEvent("tick", {})])  # a known session: no read
    child = store.spawn(
        AGENT, "/w", BindingSpec(SinkKind.PARENT, parent.id), None, None, parent_id=parent.id
    )
    assert delivery.wait_idle(10)
    time.sleep(0.2)  # a pass that was going to happen has had its time
    assert (lookups, delivery.log_reads, store.commit_stats[1]) == ([], reads, writes + 3)
    assert child.binding is not None
    store.close_session(child.session.id)  # a run's end for the sink: delivered, checkpointed
    assert delivery.wait_idle(10)
    delivery.close()
    binding = store.get_binding(child.binding.id)
    assert binding is not None and binding.last_delivered_seq == 2
    assert delivery.log_reads == reads + 1  # the sink's first delivery reads its binding


def test_failing_sink_is_retried_and_never_blocks_another_binding(store: Store) -> None:
    healthy: list[int] = []
    attempts = {"n": 0}
    flaky_got: list[int] = []

    def flaky(event: EventRecord) -> None:
        attempts["n"] += 1
        if attempts["n"] <= 3:
            raise OSError("destination unavailable")
        flaky_got.append(event.seq)

    delivery = DeliveryService(store, max_backoff_s=0.2)
    delivery.register_callback("healthy", lambda e: healthy.append(e.seq))
    delivery.register_callback("flaky", flaky)
    sid_ok, _ = _spawn_with(store, BindingSpec(SinkKind.CALLBACK, "healthy"), "ok")
    sid_bad, bad_binding = _spawn_with(store, BindingSpec(SinkKind.CALLBACK, "flaky"), "bad")
    store.append_events(sid_ok, None, [NewEvent("x", {})])
    store.append_events(sid_bad, None, [NewEvent("x", {})])
    deadline = time.monotonic() + 5
    while len(healthy) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert healthy == [1, 2]  # delivered while the other sink was still failing
    assert delivery.wait_idle(10)
    delivery.close()
    assert attempts["n"] >= 4
    assert flaky_got == [1, 2]  # the failed batch came again, whole and in order
    binding = store.get_binding(bad_binding)
    assert binding is not None and binding.last_delivered_seq == 2


def test_unregistered_callback_waits_with_checkpoint_unmoved_until_registered(
    store: Store,
) -> None:
    delivery = DeliveryService(store)
    sid, bid = _spawn_with(store, BindingSpec(SinkKind.CALLBACK, "later"), "a")
    store.append_events(sid, None, [NewEvent("x", {})])
    # The projector ran and the sink refused (no such callback yet): the checkpoint stayed.
    eventually(lambda: delivery.failures(bid) >= 1, 10, "a refused delivery")
    binding = store.get_binding(bid)
    assert binding is not None and binding.last_delivered_seq == 0
    got: list[int] = []
    delivery.register_callback("later", lambda e: got.append(e.seq))
    assert delivery.wait_idle(10)
    delivery.close()
    assert got == [1, 2]


def test_jsonl_sink_dedupes_by_event_id_when_reopened(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    sid, _ = _spawn_with(store, BindingSpec(SinkKind.JSONL, str(path)), "a")
    store.append_events(sid, None, [NewEvent("x", {"i": i}) for i in range(4)])
    events = store.events(sid)
    sink = JsonlFileSink(str(path))
    sink.deliver(events[:3])
    sink.close()
    reopened = JsonlFileSink(str(path))
    reopened.deliver(events)  # the first three again, as after a crash before the checkpoint
    reopened.close()
    ids = [json.loads(line)["eventId"] for line in path.read_text().splitlines()]
    assert ids == [e.id for e in events]


def test_jsonl_sink_cuts_a_torn_last_line_before_appending(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    sid, _ = _spawn_with(store, BindingSpec(SinkKind.JSONL, str(path)), "a")
    store.append_events(sid, None, [NewEvent("x", {}), NewEvent("y", {})])
    events = store.events(sid)
    sink = JsonlFileSink(str(path))
    sink.deliver(events[:1])
    sink.close()
    with path.open("ab") as fh:
        fh.write(b'{"eventId": 99, "half a li')  # a crash mid-write
    reopened = JsonlFileSink(str(path))
    reopened.deliver(events)
    reopened.close()
    lines = path.read_text().splitlines()
    assert [json.loads(line)["eventId"] for line in lines] == [e.id for e in events]


def test_events_appended_from_many_threads_reach_the_sink_once_each(
    store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "out.jsonl"
    delivery = DeliveryService(store, batch_size=5)
    delivery.start()
    sid, _ = _spawn_with(store, BindingSpec(SinkKind.JSONL, str(path)), "a")

    def worker() -> None:
        for _ in range(25):
            store.append_events(sid, None, [NewEvent("tick", {})])

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert delivery.wait_idle(10)
    delivery.close()
    seqs = [json.loads(line)["seq"] for line in path.read_text().splitlines()]
    assert seqs == list(range(1, 102))


def _deliver_to_file(db: str, sink_path: Path, events: int) -> tuple[str, list[int]]:
    """Open the store at ``db``, bind one session to the JSONL file, append ``events``
    events, deliver them all; the store's identity and the event ids it gave them."""
    with Store.open(db) as store:
        delivery = DeliveryService(store)
        delivery.start()
        sid, _ = _spawn_with(store, BindingSpec(SinkKind.JSONL, str(sink_path)), "s")
        appended = store.append_events(
            sid, None, [NewEvent("tick", {"i": i}) for i in range(events)]
        )
        assert delivery.wait_idle(10)
        delivery.close()
        return store.identity, [e.id for e in appended]


def _remove_store(request: pytest.FixtureRequest, db: str) -> None:
    """The store is gone, its place empty: the SQLite file and its side files deleted, or
    the PostgreSQL database dropped and created again (empty) under the same name."""
    if is_postgres(db):
        server: PostgresServer = request.getfixturevalue("postgres_server")
        server.drop_database(db)
        server.create_database(urlsplit(db).path.lstrip("/"))
        return
    path = Path(db)
    for side in path.parent.glob(path.name + "*"):
        side.unlink()


def test_a_store_created_again_next_to_an_old_jsonl_sink_delivers_every_new_event(
    tmp_path: Path, db: str, request: pytest.FixtureRequest
) -> None:
    """Event ids restart at 1 in a new store: the old file's ids must not swallow them."""
    sink_path = tmp_path / "out.jsonl"
    first_store, first_ids = _deliver_to_file(db, sink_path, 8)
    _remove_store(request, db)  # the store is gone; the sink file stays
    second_store, second_ids = _deliver_to_file(db, sink_path, 8)
    assert first_store != second_store
    assert set(first_ids) & set(second_ids)  # the ids collide: only the identity tells them apart
    lines = [json.loads(x) for x in sink_path.read_text().splitlines()]
    by_store = {
        s: [ln["eventId"] for ln in lines if ln["storeId"] == s]
        for s in (first_store, second_store)
    }
    # spawn (1 event) + 8 appended per store, every one of them in the file exactly once
    assert len(by_store[first_store]) == 9 and len(set(by_store[first_store])) == 9
    assert len(by_store[second_store]) == 9 and len(set(by_store[second_store])) == 9


def test_lines_written_before_store_identities_count_as_the_stores_own(tmp_path: Path) -> None:
    """A file from before migration 0007 (no storeId): re-delivered events are still skipped."""
    path = tmp_path / "old.jsonl"
    path.write_text('{"eventId": 1, "seq": 1}\n{"eventId": 2, "seq": 2}\n')
    sink = JsonlFileSink(str(path), "abc")
    assert sink.delivered_ids() == frozenset({1, 2})
    sink.close()
    path.write_text('{"storeId": "other", "eventId": 1}\n')
    sink = JsonlFileSink(str(path), "abc")
    assert sink.delivered_ids() == frozenset()
    sink.close()
