"""Child sessions: limits, exactly-once announce, cascades, orphans — real agent subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actors.delivery import announce as announce_sink
from control_plane import CommandState, ControlPlane, LimitExceeded, SessionState
from store import Store
from store.faults import ENV_VAR
from store.ops.announce import announce_finished_runs
from store.write_context import appended_events
from tests.conftest import eventually
from tests.support.cp_harness import example_agent, noop_agent, open_cp


def _announces(cp: ControlPlane, parent_id: str) -> list[dict[str, Any]]:
    return [e.payload for e in cp.events(parent_id) if e.kind == "announce"]


def _in_state(cp: ControlPlane, session_id: str, state: SessionState) -> Callable[[], bool]:
    return lambda: cp.get(session_id).state is state


def test_three_children_announce_exactly_once_and_the_parent_continues(
    tmp_path: Path, db: str
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        parent = cp.spawn(example_agent(tmp_path), tmp_path, "I am the parent")
        assert parent.command is not None and cp.wait(parent.command.id, 30).ok
        pid = parent.session.id
        kids = [
            cp.spawn(example_agent(tmp_path), tmp_path, f"child task {i}", parent=pid, mode="run")
            for i in range(3)
        ]
        eventually(lambda: len(_announces(cp, pid)) == 3)
        # every child ran once and closed (mode=run); each announce names its run, status ok
        for kid in kids:
            assert kid.session.depth == 1
            eventually(_in_state(cp, kid.session.id, SessionState.CLOSED))
        announced = _announces(cp, pid)
        assert sorted(a["childSessionId"] for a in announced) == sorted(k.session.id for k in kids)
        assert {a["status"] for a in announced} == {"ok"}
        assert all(a["text"].startswith("Echo: child task") for a in announced)
        # the parent got one follow-up per child and answered each
        follow_ups = [
            c
            for c in cp.commands(pid)
            if c.idempotency_key and c.idempotency_key.startswith("announce:")
        ]
        assert len(follow_ups) == 3
        for command in follow_ups:
            assert cp.wait(command.id, 30).ok
        history = cp.wait(cp.prompt(pid, "#history").id, 30)
        assert history.text.count("[subagent") == 3
        assert cp.wait_delivered(30)  # every binding caught up: no announce is on its way
        assert len(_announces(cp, pid)) == 3
        export = cp.export_jsonl(pid, tmp_path / "parent.jsonl")
        lines = [json.loads(x) for x in export.read_text().splitlines()]
        assert sum(1 for x in lines if x["type"] == "custom_message") == 3
        child_export = cp.export_jsonl(kids[0].session.id, tmp_path / "child.jsonl")
        assert json.loads(child_export.read_text().splitlines()[0])["parentSession"] == pid


def test_a_childs_turn_end_and_its_announce_commit_together(
    tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The announce is written in the transaction that ends the child's turn: one commit
    carries the child's ``turn_ended`` and the parent's ``announce`` (and its follow-up), and
    the delivery's announce sink, handed the same events, finds nothing left to write."""
    sink_writes: list[str] = []
    real = announce_finished_runs

    def counted(ctx: Any, child_id: str, parent_id: str, as_prompt: bool) -> int:
        sink_writes.append(child_id)
        return real(ctx, child_id, parent_id, as_prompt)

    monkeypatch.setattr(announce_sink, "announce_finished_runs", counted)
    with open_cp(tmp_path, db=db) as cp:
        parent = cp.spawn(example_agent(tmp_path), tmp_path, "I am the parent")
        assert parent.command is not None and cp.wait(parent.command.id, 30).ok
        pid = parent.session.id
        commits: list[list[tuple[str, str]]] = []
        cp._store.watch.appends(
            lambda appended, _bound: commits.append(
                [(e.session_id, e.kind) for a in appended for e in appended_events(a)]
            )
        )
        kid = cp.spawn(example_agent(tmp_path), tmp_path, "child task", parent=pid, mode="run")
        kid_id = kid.session.id
        eventually(lambda: len(_announces(cp, pid)) == 1)
        eventually(_in_state(cp, kid_id, SessionState.CLOSED))
        assert cp.wait_delivered(30)  # the sink has seen the turn's end and the close
        carrying = [c for c in commits if (pid, "announce") in c]
        assert len(carrying) == 1
        assert (kid_id, "turn_ended") in carrying[0]
        assert sink_writes == []
        assert kid.command is not None
        key = f"announce:{kid.command.id}"
        follow_up = [c for c in cp.commands(pid) if c.idempotency_key == key]
        assert len(follow_up) == 1 and cp.wait(follow_up[0].id, 30).ok


def test_limits_refuse_too_deep_and_too_many_children_with_the_limit_named(
    tmp_path: Path,
    db: str,
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        agent = noop_agent()
        root = cp.spawn(agent, tmp_path).session.id
        level1 = cp.spawn(agent, tmp_path, parent=root).session.id
        level2 = cp.spawn(agent, tmp_path, parent=level1).session.id
        with pytest.raises(LimitExceeded) as deep:
            cp.spawn(agent, tmp_path, parent=level2)  # a fourth level
        assert deep.value.limit == "max_depth"
        for _ in range(4):  # level1 above is the first child of root
            cp.spawn(agent, tmp_path, parent=root)
        with pytest.raises(LimitExceeded) as many:
            cp.spawn(agent, tmp_path, parent=root)  # the sixth open child
        assert many.value.limit == "max_children" and "5 open children" in str(many.value)
        assert len(cp.children(root)) == 5


def test_cancel_and_close_cascade_to_descendants(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        agent = noop_agent()
        root = cp.spawn(agent, tmp_path, "#hang").session.id
        child = cp.spawn(agent, tmp_path, "#hang", parent=root, announce=False)
        grandchild = cp.spawn(agent, tmp_path, "#hang", parent=child.session.id, announce=False)
        for sid in (root, child.session.id, grandchild.session.id):
            eventually(_in_state(cp, sid, SessionState.RUNNING))
        cp.cancel(root)
        assert child.command is not None and grandchild.command is not None
        assert cp.wait(child.command.id, 30).state is CommandState.CANCELLED
        assert cp.wait(grandchild.command.id, 30).state is CommandState.CANCELLED
        cp.close_session(root)
        for sid in (root, child.session.id, grandchild.session.id):
            assert cp.get(sid).state is SessionState.CLOSED


def test_a_child_of_a_closed_parent_does_not_announce_but_keeps_its_result(
    tmp_path: Path,
    db: str,
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        agent = example_agent(tmp_path)
        root = cp.spawn(agent, tmp_path).session.id
        child = cp.spawn(agent, tmp_path, "#chunks=3 #delay=200 slow child", parent=root)
        assert child.command is not None
        eventually(lambda: cp.get(child.session.id).state is SessionState.RUNNING)
        cp._store.close_session(root)  # the parent alone (as if by another process)
        assert cp.wait(child.command.id, 30).ok  # the child's result stays readable
        assert cp.wait_delivered(30)  # the child's events reached its binding, and then:
        assert _announces(cp, root) == []


def test_orphans_are_closed_on_recovery(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        agent = example_agent(tmp_path)
        root = cp.spawn(agent, tmp_path).session.id
        child = cp.spawn(agent, tmp_path, parent=root, announce=False).session.id
    with Store.open(db) as store:
        store.close_session(root)  # a crash after the parent closed, before its child
        assert store.get_session(child).state is not SessionState.CLOSED
    with open_cp(tmp_path, db=db) as cp:
        assert cp.get(child).state is SessionState.CLOSED


_ANNOUNCE_DRIVER = """
import sys, time
from pathlib import Path
from tests.support.cp_harness import example_agent, noop_agent, open_cp
tmp = Path(sys.argv[1])
cp = open_cp(tmp, sys.argv[2])
root = cp.spawn(example_agent(tmp), tmp, idempotency_key="root").session.id
for i in range(3):
    cp.spawn(example_agent(tmp), tmp, f"kid {i}", parent=root, mode="run",
             idempotency_key=f"kid{i}")
print(root, flush=True)
time.sleep(120)
"""


def test_kill_9_during_announce_delivers_each_announce_once_after_restart(
    tmp_path: Path, db: str
) -> None:
    env = dict(os.environ)
    env[ENV_VAR] = "announce.after_commit=kill"  # die right after an announce commits
    proc = subprocess.Popen(
        [sys.executable, "-c", _ANNOUNCE_DRIVER, str(tmp_path), db],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    root = proc.stdout.readline().strip()
    assert proc.wait(90) == -signal.SIGKILL  # killed between announce commit and checkpoint
    with Store.open(db) as store:
        assert 1 <= sum(1 for e in store.events(root) if e.kind == "announce") <= 3
    with open_cp(tmp_path, db=db) as cp:  # restart without the fault: the rest is delivered once
        eventually(lambda: len(_announces(cp, root)) == 3, 90)
        assert cp.wait_delivered(30)  # nothing left to deliver, so no fourth is coming
        announced = _announces(cp, root)
        assert len(announced) == 3
        assert len({a["commandId"] for a in announced}) == 3
        keys = [c.idempotency_key for c in cp.commands(root)]
        assert sum(1 for k in keys if k and k.startswith("announce:")) == 3


def test_children_beyond_max_running_children_wait_their_turn(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db, max_running_children=1) as cp:
        agent = example_agent(tmp_path)
        root = cp.spawn(agent, tmp_path).session.id
        kids = [
            cp.spawn(agent, tmp_path, f"#chunks=4 #delay=100 kid {i}", parent=root, mode="run")
            for i in range(3)
        ]
        peak = 0
        deadline = time.monotonic() + 120
        while len(_announces(cp, root)) < 3 and time.monotonic() < deadline:
            running = [
                k
                for k in kids
                if cp.get(k.session.id).state in (SessionState.RUNNING, SessionState.CANCELLING)
            ]
            peak = max(peak, len(running))
            time.sleep(0.02)
        assert len(_announces(cp, root)) == 3
        assert peak == 1
