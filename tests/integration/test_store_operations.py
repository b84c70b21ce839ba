from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from state_machines import (
    CommandState,
    IdempotencyConflict,
    IllegalTransition,
    SessionClosed,
    SessionEvent,
    SessionNotFound,
    SessionState,
    StaleEpoch,
)
from state_machines.errors import CheckpointError, CommandNotFound, LimitExceeded
from store import (
    AgentSpec,
    BindingSpec,
    CommandKind,
    NewEvent,
    SinkKind,
    Store,
    SubagentLimits,
    ops,
    queries,
)
from store.ops import budgets, turns
from store.placement import Placement
from store.usage import Budget, BudgetScope
from store.writer import WriteContext
from tests.conftest import AGENT
from tests.support.direct_sql import query

# The PostgreSQL variants stay in the default run: every store operation
# is its backend's own SQL.
pytestmark = pytest.mark.backend_specific

PROMPT = [{"type": "text", "text": "hello"}]


def _spawn(store: Store, key: str | None = "spawn-1", tmp: Path | None = None):
    binding = BindingSpec(SinkKind.JSONL, str((tmp or Path("/tmp")) / "sink.jsonl"))
    return store.spawn(AGENT, "/work", binding, PROMPT, key)


def test_spawn_creates_session_binding_and_first_command_together(store: Store) -> None:
    result = _spawn(store)
    assert result.created
    assert result.session.state is SessionState.CREATING
    assert result.binding is not None and result.binding.last_delivered_seq == 0
    assert result.command is not None
    assert (result.command.seq, result.command.state) == (1, CommandState.QUEUED)
    assert result.command.payload == {"content": PROMPT}
    assert [e.kind for e in store.events(result.session.id)] == ["session_created"]


def test_duplicate_spawn_key_returns_the_first_spawn(store: Store) -> None:
    first = _spawn(store)
    again = _spawn(store)
    assert not again.created
    assert again.session.id == first.session.id
    assert again.command is not None and first.command is not None
    assert again.command.id == first.command.id
    assert len(store.list_sessions()) == 1


def test_spawn_key_reused_with_other_input_is_a_conflict(store: Store) -> None:
    first = _spawn(store)
    with pytest.raises(IdempotencyConflict) as info:
        store.spawn(AGENT, "/elsewhere", None, PROMPT, "spawn-1")
    assert info.value.key == "spawn-1"
    assert info.value.existing_id == first.session.id
    assert len(store.list_sessions()) == 1


def test_enqueue_assigns_monotonic_seq(store: Store) -> None:
    sid = _spawn(store).session.id
    seqs = [
        store.enqueue(sid, CommandKind.PROMPT, {"content": PROMPT}, f"k{i}").command.seq
        for i in range(5)
    ]
    assert seqs == [2, 3, 4, 5, 6]


def test_the_writers_records_equal_what_a_read_returns(store: Store) -> None:
    """The writer builds a command's record from its row without the dataclass's
    constructor, and its times only when asked: the same record as a read builds, with the
    same UTC times."""
    sid = _spawn(store).session.id
    spawned = store.claim_next(sid)
    assert spawned is not None
    finished = store.complete(spawned.id, {"stopReason": "end_turn"})
    queued = store.enqueue(sid, CommandKind.PROMPT, {"content": PROMPT}, "k").command
    for written in (finished, queued):
        read = store.get_command(written.id)
        assert written == read and hash(written) == hash(read)
        assert written.created_at == read.created_at
        assert written.created_at.utcoffset() == timedelta(0)
        assert abs(written.created_at.timestamp() - written.created_ts) < 1e-6
    assert finished.started_at is not None and finished.finished_at is not None
    assert finished.started_at <= finished.finished_at
    assert queued.started_at is None and queued.finished_at is None
    with pytest.raises(AttributeError):
        queued.state = CommandState.RUNNING  # type: ignore[misc]


def test_duplicate_prompt_key_returns_first_outcome(store: Store) -> None:
    sid = _spawn(store).session.id
    spawned = store.claim_next(sid)  # the spawn's first prompt
    assert spawned is not None
    store.complete(spawned.id, {"stopReason": "end_turn"})
    first = store.enqueue(sid, CommandKind.PROMPT, {"content": PROMPT}, "p")
    assert first.created
    claimed = store.claim_next(sid)
    assert claimed is not None and claimed.id == first.command.id
    store.complete(claimed.id, {"stopReason": "end_turn", "text": "hi"})
    again = store.enqueue(sid, CommandKind.PROMPT, {"content": PROMPT}, "p")
    assert not again.created
    assert again.command.id == first.command.id
    assert again.command.state is CommandState.COMPLETED
    assert again.command.result == {"stopReason": "end_turn", "text": "hi"}
    assert len(store.commands_of(sid)) == 2


def test_prompt_key_reused_with_other_payload_is_a_conflict(store: Store) -> None:
    sid = _spawn(store).session.id
    store.enqueue(sid, CommandKind.PROMPT, {"content": PROMPT}, "p")
    with pytest.raises(IdempotencyConflict) as info:
        store.enqueue(sid, CommandKind.PROMPT, {"content": [{"type": "text", "text": "x"}]}, "p")
    assert info.value.key == "p"
    assert len(store.commands_of(sid)) == 2  # nothing added


def test_same_key_in_two_sessions_is_two_commands(store: Store) -> None:
    a = _spawn(store, "a").session.id
    b = _spawn(store, "b").session.id
    ca = store.enqueue(a, CommandKind.PROMPT, {"content": PROMPT}, "p").command
    cb = store.enqueue(b, CommandKind.PROMPT, {"content": PROMPT}, "p").command
    assert ca.id != cb.id


def test_command_to_closed_session_raises_session_closed(store: Store) -> None:
    sid = _spawn(store).session.id
    store.close_session(sid)
    with pytest.raises(SessionClosed) as info:
        store.enqueue(sid, CommandKind.PROMPT, {"content": PROMPT}, "late")
    assert info.value.session_id == sid


def test_unknown_session_id_raises_session_not_found(store: Store) -> None:
    for call in (
        lambda: store.get_session("nope"),
        lambda: store.enqueue("nope", CommandKind.PROMPT, {"content": PROMPT}),
        lambda: store.claim_next("nope"),
        lambda: store.append_events("nope", None, [NewEvent("x", {})]),
        lambda: store.close_session("nope"),
        lambda: store.events("nope"),
    ):
        with pytest.raises(SessionNotFound):
            call()


def test_unknown_command_id_raises_command_not_found(store: Store) -> None:
    with pytest.raises(CommandNotFound):
        store.complete("nope", {})


def test_claim_next_takes_commands_in_seq_order_and_counts_attempts(store: Store) -> None:
    sid = _spawn(store).session.id
    store.enqueue(sid, CommandKind.PROMPT, {"content": PROMPT}, "2")
    first = store.claim_next(sid)
    second = store.claim_next(sid)
    assert first is not None and second is not None
    assert (first.seq, second.seq) == (1, 2)
    assert first.state is CommandState.RUNNING and first.attempts == 1
    assert store.claim_next(sid) is None


def test_completing_a_finished_command_is_an_illegal_transition(store: Store) -> None:
    sid = _spawn(store).session.id
    cmd = store.claim_next(sid)
    assert cmd is not None
    store.fail(cmd.id, "agent crashed")
    with pytest.raises(IllegalTransition) as info:
        store.complete(cmd.id, {"stopReason": "end_turn"})
    assert info.value.state == "failed" and info.value.event == "complete"
    assert store.get_command(cmd.id).error == "agent crashed"


def test_illegal_session_transition_leaves_state_unchanged(store: Store) -> None:
    sid = _spawn(store).session.id
    with pytest.raises(IllegalTransition):
        store.write(lambda ctx: ops.transition_session(ctx.conn, sid, SessionEvent.TURN_ENDED))
    assert store.get_session(sid).state is SessionState.CREATING


def test_an_owners_writes_are_fenced_by_the_statements_that_make_them(store: Store) -> None:
    """The turn's writes carry the fence in the statement that takes the seqs or moves the
    state (no read of the epoch before it): a stale epoch is refused and writes nothing, an
    unknown session is ``SessionNotFound``, and the owner's own epoch goes through."""
    sid = _spawn(store).session.id
    epoch = store.write(lambda ctx: ops.acquire(ctx, sid, "me"))
    store.write(lambda ctx: ops.transition_session(ctx.conn, sid, SessionEvent.CREATED))
    stale = epoch - 1
    frame = [("session_update", '{"n":1}', None)]
    refused: list[Callable[[WriteContext], object]] = [
        lambda ctx: ops.append_events(ctx, sid, None, [NewEvent("k", {})], epoch=stale),
        lambda ctx: ops.append_frames(ctx, sid, None, frame, stale),
        lambda ctx: ops.transition_session(ctx.conn, sid, SessionEvent.TURN_STARTED, stale),
    ]
    for write in refused:
        with pytest.raises(StaleEpoch):
            store.write(write)
    after = store.get_session(sid)
    assert (after.state, after.last_event_seq) == (SessionState.IDLE, 1)
    for write in (
        lambda ctx: ops.append_frames(ctx, "nope", None, frame, epoch),
        lambda ctx: ops.transition_session(ctx.conn, "nope", SessionEvent.TURN_STARTED, epoch),
    ):
        with pytest.raises(SessionNotFound):
            store.write(write)
    assert store.write(lambda ctx: ops.append_frames(ctx, sid, None, frame, epoch)) == 2
    store.write(lambda ctx: ops.transition_session(ctx.conn, sid, SessionEvent.TURN_STARTED, epoch))
    assert store.get_session(sid).state is SessionState.RUNNING


@pytest.mark.parametrize("burst", [1, 7, 8, 9, 63, 64, 100, 131])
def test_a_burst_of_frames_lands_in_order_with_the_ids_the_commit_announces(
    store: Store, burst: int
) -> None:
    """A recorder's burst goes in as a few multi-row statements on SQLite (and the last few
    rows as one ``executemany``): every frame at its seq, in order, and the global ids the
    commit hands its listeners are the ones the log gave them."""
    sid = _spawn(store).session.id
    announced: list[tuple[int, list[int]]] = []
    store.watch.appends(
        lambda appended, _bound: announced.extend(
            (entry[1], list(entry[5])) for entry in appended if entry[0] == sid
        )
    )
    frames = [("session_update", f'{{"n":{i}}}', None) for i in range(burst)]
    last = store.write(lambda ctx: ops.append_frames(ctx, sid, None, frames))
    events = store.events(sid)[-burst:]
    assert last == events[-1].seq
    assert [e.payload["n"] for e in events] == list(range(burst))
    assert [e.seq for e in events] == list(range(last - burst + 1, last + 1))
    assert announced == [(last - burst + 1, [e.id for e in events])]


def test_a_stale_owners_turn_outcome_changes_nothing(store: Store) -> None:
    """``finish_turn`` from an owner that lost the session: refused before anything of it
    stands (no ``turn_ended``, the command still running, the session still in its turn)."""
    sid = _spawn(store).session.id
    epoch = store.write(lambda ctx: ops.acquire(ctx, sid, "me"))
    store.write(lambda ctx: ops.transition_session(ctx.conn, sid, SessionEvent.CREATED))
    claimed = store.write(lambda ctx: turns.begin_next(ctx, sid, epoch, collect=False))
    ids = tuple(c.id for c in claimed)
    outcome = {"stopReason": "end_turn"}
    with pytest.raises(StaleEpoch):
        store.write(
            lambda ctx: turns.finish_turn(
                ctx, sid, epoch + 1, ids, outcome, CommandState.COMPLETED, None
            )
        )
    assert store.get_session(sid).state is SessionState.RUNNING
    assert store.get_command(ids[0]).state is CommandState.RUNNING
    assert store.events(sid)[-1].kind == "prompt"
    store.enqueue(sid, CommandKind.PROMPT, {"content": PROMPT})  # queued during the turn
    queued = store.write(
        lambda ctx: turns.finish_turn(ctx, sid, epoch, ids, outcome, CommandState.COMPLETED, None)
    )
    assert queued is True  # read by the statement that ended the turn
    assert store.get_session(sid).state is SessionState.IDLE
    assert store.events(sid)[-1].kind == "turn_ended"
    again = store.write(lambda ctx: turns.begin_next(ctx, sid, epoch, collect=False))
    assert len(again) == 1
    again_ids = (again[0].id,)
    assert not store.write(
        lambda ctx: turns.finish_turn(
            ctx, sid, epoch, again_ids, outcome, CommandState.COMPLETED, None
        )
    )


def test_append_events_assigns_contiguous_seqs_and_keeps_raw_json(store: Store) -> None:
    sid = _spawn(store).session.id
    raw = '{"sessionId": "x",  "update": {"sessionUpdate": "vendor_thing", "n": 1.50}}'
    appended = store.append_events(sid, None, [NewEvent("session_update", raw), NewEvent("k", {})])
    assert [e.seq for e in appended] == [2, 3]
    assert appended[0].raw == raw  # byte for byte, whitespace and number format included
    assert [e.seq for e in store.events(sid)] == [1, 2, 3]


def test_append_events_refuses_payload_that_is_not_json(store: Store) -> None:
    sid = _spawn(store).session.id
    with pytest.raises(ValueError):
        store.append_events(sid, None, [NewEvent("session_update", "{not json")])
    assert [e.seq for e in store.events(sid)] == [1]


def test_concurrent_appends_get_unique_increasing_seqs(store: Store) -> None:
    sid = _spawn(store).session.id

    def worker(n: int) -> None:
        for i in range(25):
            store.append_events(sid, None, [NewEvent("tick", {"w": n, "i": i})])

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = [e.seq for e in store.events(sid)]
    assert seqs == list(range(1, 202))
    per_worker: dict[int, list[int]] = {}
    for e in store.events(sid)[1:]:
        per_worker.setdefault(e.payload["w"], []).append(e.payload["i"])
    assert all(v == list(range(25)) for v in per_worker.values())


def test_close_deactivates_bindings_cancels_open_commands_and_writes_final_event(
    store: Store,
) -> None:
    sid = _spawn(store).session.id
    store.enqueue(sid, CommandKind.PROMPT, {"content": PROMPT}, "2")
    running = store.claim_next(sid)
    assert running is not None
    closed = store.close_session(sid, "user asked")
    assert closed.state is SessionState.CLOSED and closed.closed_at is not None
    assert {c.state for c in store.commands_of(sid)} == {CommandState.CANCELLED}
    assert store.bindings_of(sid, active_only=True) == []
    assert store.events(sid)[-1].kind == "closed"
    assert store.events(sid)[-1].payload == {"reason": "user asked"}
    with pytest.raises(SessionClosed):
        store.append_events(sid, None, [NewEvent("late", {})])


def test_repeated_close_is_absorbed(store: Store) -> None:
    sid = _spawn(store).session.id
    store.close_session(sid)
    n = len(store.events(sid))
    assert store.close_session(sid).state is SessionState.CLOSED
    assert store.cancel(sid) is SessionState.CLOSED
    assert len(store.events(sid)) == n


def test_cancel_moves_a_running_session_to_cancelling(store: Store) -> None:
    sid = _spawn(store).session.id
    store.write(lambda ctx: ops.transition_session(ctx.conn, sid, SessionEvent.CREATED))
    store.write(lambda ctx: ops.transition_session(ctx.conn, sid, SessionEvent.TURN_STARTED))
    assert store.cancel(sid) is SessionState.CANCELLING
    assert store.events(sid)[-1].kind == "cancel_requested"
    assert store.cancel(sid) is SessionState.CANCELLING  # repeated cancel is harmless


def test_cancel_with_queue_cancels_queued_commands(store: Store) -> None:
    sid = _spawn(store).session.id
    store.cancel(sid, include_queued=True)
    assert [c.state for c in store.commands_of(sid)] == [CommandState.CANCELLED]


def test_checkpoint_never_moves_backwards_or_past_the_log(store: Store) -> None:
    spawn = _spawn(store)
    assert spawn.binding is not None
    bid, sid = spawn.binding.id, spawn.session.id
    store.append_events(sid, None, [NewEvent("a", {}), NewEvent("b", {})])
    assert store.advance_checkpoint(bid, 2) == 2
    assert store.advance_checkpoint(bid, 2) == 2  # same position is a no-op
    with pytest.raises(CheckpointError) as back:
        store.advance_checkpoint(bid, 1)
    assert (back.value.current, back.value.requested) == (2, 1)
    with pytest.raises(CheckpointError) as past:
        store.advance_checkpoint(bid, 4)
    assert past.value.last_event == 3
    binding = store.get_binding(bid)
    assert binding is not None and binding.last_delivered_seq == 2


def test_recover_requeues_interrupted_runs_within_budget_then_fails_them(db: str) -> None:
    store = Store.open(db)
    sid = _spawn(store).session.id
    cmd_id = ""
    for attempt in range(1, 4):
        claimed = store.claim_next(sid)
        assert claimed is not None and claimed.attempts == attempt
        cmd_id = claimed.id
        report = store.recover()  # as if the process died mid-run
        if attempt < 3:
            assert report.requeued == (cmd_id,)
            assert store.get_command(cmd_id).state is CommandState.QUEUED
    assert report.failed == (cmd_id,)
    failed = store.get_command(cmd_id)
    assert failed.state is CommandState.FAILED
    assert failed.error is not None and "attempt budget of 3 exhausted" in failed.error
    interrupted = [e.payload for e in store.events(sid) if e.kind == "interrupted"]
    assert [p["willRetry"] for p in interrupted] == [True, True, False]
    store.close()


def test_recover_moves_sessions_caught_mid_turn_to_error(store: Store) -> None:
    sid = _spawn(store).session.id
    store.write(lambda ctx: ops.transition_session(ctx.conn, sid, SessionEvent.CREATED))
    store.write(lambda ctx: ops.transition_session(ctx.conn, sid, SessionEvent.TURN_STARTED))
    report = store.recover()
    assert report.sessions_to_error == (sid,)
    assert store.get_session(sid).state is SessionState.ERROR


def test_one_failing_write_in_a_group_commit_does_not_undo_the_others(store: Store) -> None:
    sid = _spawn(store).session.id
    barrier = threading.Barrier(9)
    outcomes: list[str] = []

    def good(i: int) -> None:
        barrier.wait()
        store.append_events(sid, None, [NewEvent("ok", {"i": i})])
        outcomes.append("ok")

    def bad() -> None:
        barrier.wait()
        try:
            store.enqueue(sid, CommandKind.PROMPT, {"content": PROMPT}, None)
            store.write(lambda ctx: ops.transition_session(ctx.conn, sid, SessionEvent.TURN_ENDED))
        except IllegalTransition:
            outcomes.append("refused")

    threads = [threading.Thread(target=good, args=(i,)) for i in range(8)]
    threads.append(threading.Thread(target=bad))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok"] * 8 + ["refused"]
    assert len([e for e in store.events(sid) if e.kind == "ok"]) == 8


def test_group_commit_acknowledges_many_writes_per_transaction(store: Store, db: str) -> None:
    sid = _spawn(store).session.id
    before_batches, before_writes = store.commit_stats
    barrier = threading.Barrier(32)

    def worker() -> None:
        barrier.wait()
        for _ in range(20):
            store.append_events(sid, None, [NewEvent("e", {})])

    threads = [threading.Thread(target=worker) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    batches, writes = store.commit_stats
    assert writes - before_writes == 640
    assert batches - before_batches < 640  # some transactions held several writes
    # every acknowledged write is visible to a fresh connection on the database
    assert query(db, "select count(*) from events where kind='e'") == [(640,)]


def test_a_spawns_records_are_what_reading_them_back_returns(store: Store, tmp_path: Path) -> None:
    """The spawn builds its records in memory instead of reading them back: every field must
    be what a read returns, for each shape of spawn (the agent's env values are never in
    them, only the names)."""
    secret = AgentSpec("secret-agent", ("agent", "--acp"), env=(("API_KEY", "s3cr3t"),))
    root = store.spawn(
        secret,
        "/work",
        BindingSpec(SinkKind.JSONL, str(tmp_path / "root.jsonl")),
        PROMPT,
        "root-key",
        metadata={"budget": {"tokens": 10}, "tags": ["a", "é"]},
        placement=Placement(labels=("gpu", "eu")),
    )
    child = store.spawn(
        AGENT,
        "/work/child",
        BindingSpec(SinkKind.PARENT, root.session.id),
        None,
        None,
        parent_id=root.session.id,
        queue_mode="collect",
        limits=SubagentLimits(max_depth=2, max_children=3),
    )
    bare = store.spawn(AGENT, "/work", None, None, None)
    for result in (root, child, bare):
        assert result.session == store.get_session(result.session.id)
        if result.binding is not None:
            assert result.binding == store.get_binding(result.binding.id)
        if result.command is not None:
            assert result.command == store.get_command(result.command.id)
    assert root.session.agent.env == () and root.session.agent.env_names == ("API_KEY",)
    assert child.session.depth == 1 and child.session.placement == root.session.placement
    # A parent binding's checkpoint starts past the child's session_created (the announce
    # sink acts only on a run's end); every other binding's at 0.
    assert child.binding is not None and child.binding.last_delivered_seq == 1
    assert root.binding is not None and root.binding.last_delivered_seq == 0


def test_a_child_spawn_checks_its_parent_in_one_read_and_in_order(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        store.spawn(AGENT, "/work", None, None, None, parent_id="no-such-session")
    parent = store.spawn(AGENT, "/work", None, None, None).session
    one_child = SubagentLimits(max_depth=1, max_children=1)
    child = store.spawn(AGENT, "/work", None, None, None, parent_id=parent.id, limits=one_child)
    with pytest.raises(LimitExceeded) as many:
        store.spawn(AGENT, "/work", None, None, None, parent_id=parent.id, limits=one_child)
    assert many.value.limit == "max_children"
    with pytest.raises(LimitExceeded) as deep:
        store.spawn(AGENT, "/work", None, None, None, parent_id=child.session.id, limits=one_child)
    assert deep.value.limit == "max_depth"
    store.close_session(child.session.id)  # a closed child no longer counts
    store.spawn(AGENT, "/work", None, None, None, parent_id=parent.id, limits=one_child)
    store.close_session(parent.id)
    with pytest.raises(SessionClosed):
        store.spawn(AGENT, "/work", None, None, None, parent_id=parent.id)
    assert len(store.list_sessions(parent_id=parent.id)) == 2


def test_the_siblings_a_finished_child_wakes_are_those_with_queued_work_that_can_start(
    store: Store,
) -> None:
    """After a child's turn, only siblings a running-children cap may be holding back are
    woken: queued work, and neither in a turn nor closed."""
    parent = store.spawn(AGENT, "/work", None, None, None).session.id

    def child(prompt: list[dict[str, str]] | None) -> str:
        return store.spawn(AGENT, "/work", None, prompt, None, parent_id=parent).session.id

    finished, waiting, idle_empty, running, closed = (
        child(PROMPT),
        child(PROMPT),
        child(None),
        child(PROMPT),
        child(PROMPT),
    )
    store.write(lambda ctx: ops.transition_session(ctx.conn, running, SessionEvent.CREATED))
    store.write(lambda ctx: ops.transition_session(ctx.conn, running, SessionEvent.TURN_STARTED))
    store.close_session(closed)
    woken = store.read_raw(lambda raw: queries.siblings_with_queued_work(raw, finished, parent))
    assert woken == [waiting]
    assert idle_empty not in woken


def test_a_sessions_budget_facts_are_read_once_and_its_tree_each_time(tmp_path: Path) -> None:
    """What decides a session's budgets (its own budget, its root, the root's tree budget)
    never changes after its spawn: read at its first turn's end, not at every one. The tree's
    members are read each time (children come and go). Counted with SQLite's statement
    trace on the writer's connection."""
    store = Store.open(str(tmp_path / "facts.db"))
    try:
        tree_budget = {"treeBudget": Budget(tokens=100).to_json()}
        root = _spawn(store, None, tmp_path).session.id
        with_budget = store.spawn(AGENT, "/work", metadata=tree_budget).session.id
        child = store.spawn(AGENT, "/work", parent_id=with_budget).session.id

        def traced(session_id: str) -> tuple[list[budgets.ScopedBudget], list[str]]:
            seen: list[str] = []

            def write(ctx: WriteContext) -> list[budgets.ScopedBudget]:
                assert isinstance(ctx.raw, sqlite3.Connection)
                ctx.raw.set_trace_callback(seen.append)
                try:
                    return budgets.budgets_of(ctx, session_id, budgets.BudgetDefaults())
                finally:
                    ctx.raw.set_trace_callback(None)

            return store.write(write), seen

        found, seen = traced(root)
        assert found == [] and any("metadata" in s for s in seen)
        assert traced(root) == ([], [])  # no budget anywhere: no read at all

        found, seen = traced(child)
        assert [(b.scope, b.session_ids) for b in found] == [
            (BudgetScope.TREE, (with_budget, child))
        ]
        assert any("metadata" in s for s in seen)
        grandchild = store.spawn(AGENT, "/work", parent_id=child).session.id
        found, seen = traced(child)
        assert [set(b.session_ids) for b in found] == [{with_budget, child, grandchild}]
        assert seen and not any("metadata" in s for s in seen)  # only the tree's members
    finally:
        store.close()
