"""Crash safety with real kill -9 of a child process (no cleanup, no flush, no atexit)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from store import CommandKind, NewEvent, Store
from store.faults import ENV_VAR
from tests.conftest import AGENT


def _driver(*args: str, fault: str | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop(ENV_VAR, None)
    if fault:
        env[ENV_VAR] = fault
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.crash_driver", *args],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def _kill_after_ack(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line.startswith("acked "), line
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL
    return line.split()[1]


def _counts(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        return {
            t: conn.execute(f"select count(*) from {t}").fetchone()[0]
            for t in ("sessions", "bindings", "commands", "events", "delivery_checkpoints")
        }
    finally:
        conn.close()


@pytest.mark.parametrize(
    "point", ["spawn.after_session", "spawn.after_binding", "spawn.after_command"]
)
def test_kill_inside_spawn_leaves_nothing_then_retry_creates_everything(
    tmp_path: Path, point: str
) -> None:
    db, sink = tmp_path / "cp.db", str(tmp_path / "sink.jsonl")
    Store.open(db).close()
    proc = _driver("spawn", str(db), "job-1", sink, fault=f"{point}=kill")
    assert proc.wait(30) == -signal.SIGKILL
    assert set(_counts(db).values()) == {0}
    session_id = _kill_after_ack(_driver("spawn", str(db), "job-1", sink))
    assert _counts(db) == {
        "sessions": 1,
        "bindings": 1,
        "commands": 1,
        "events": 1,
        "delivery_checkpoints": 1,
    }
    with Store.open(db) as store:
        assert store.spawn(AGENT, "/w", None, None, None).session.id != session_id


def test_spawn_acknowledged_before_kill_is_complete_and_not_repeated(tmp_path: Path) -> None:
    db, sink = tmp_path / "cp.db", str(tmp_path / "sink.jsonl")
    first = _kill_after_ack(_driver("spawn", str(db), "job-1", sink))
    second = _kill_after_ack(_driver("spawn", str(db), "job-1", sink))
    assert first == second
    assert _counts(db)["sessions"] == 1 and _counts(db)["commands"] == 1


def test_same_key_before_and_after_a_crash_gives_one_command(tmp_path: Path) -> None:
    db = tmp_path / "cp.db"
    with Store.open(db) as store:
        sid = store.spawn(AGENT, "/w", None, None, "s").session.id
    before = _kill_after_ack(_driver("enqueue", str(db), sid, "prompt-7"))
    with Store.open(db) as store:
        after = store.enqueue(sid, CommandKind.PROMPT, {"content": []}, "prompt-7")
        assert not after.created
        assert after.command.id == before
        assert [c.idempotency_key for c in store.commands_of(sid)] == ["prompt-7"]


def test_kill_inside_enqueue_loses_the_command_and_the_retry_creates_it_once(
    tmp_path: Path,
) -> None:
    db = tmp_path / "cp.db"
    with Store.open(db) as store:
        sid = store.spawn(AGENT, "/w", None, None, "s").session.id
    proc = _driver("enqueue", str(db), sid, "prompt-7", fault="enqueue.after_insert=kill")
    assert proc.wait(30) == -signal.SIGKILL
    assert _counts(db)["commands"] == 0
    _kill_after_ack(_driver("enqueue", str(db), sid, "prompt-7"))
    _kill_after_ack(_driver("enqueue", str(db), sid, "prompt-7"))
    assert _counts(db)["commands"] == 1


def _bound_session_with_events(db: Path, sink: Path, n_events: int) -> tuple[str, list[int]]:
    """A session bound to a JSONL sink with ``n_events`` undelivered ticks; its event ids."""
    from store import BindingSpec, SinkKind

    with Store.open(db) as store:
        spawn = store.spawn(AGENT, "/w", BindingSpec(SinkKind.JSONL, str(sink)), None, "s")
        sid = spawn.session.id
        store.append_events(sid, None, [NewEvent("tick", {"i": i}) for i in range(n_events)])
        return sid, [e.id for e in store.events(sid)]


def test_delivery_killed_between_sink_write_and_checkpoint_resumes_without_loss_or_duplicates(
    tmp_path: Path,
) -> None:
    db, sink = tmp_path / "cp.db", tmp_path / "sink.jsonl"
    n_events = 60
    sid, expected = _bound_session_with_events(db, sink, n_events)
    kills = 0
    for after in (0, 2, 1, 3):  # crash after this many sink writes in each run
        proc = _driver(
            "deliver", str(db), "7", fault=f"delivery.after_sink_write=after:{after}:kill"
        )
        code = proc.wait(60)
        if code == 0:
            break
        assert code == -signal.SIGKILL
        kills += 1
    assert kills >= 3
    proc = _driver("deliver", str(db), "7")
    assert proc.wait(60) == 0
    lines = [json.loads(line) for line in sink.read_text().splitlines()]
    assert [line["eventId"] for line in lines] == expected  # all, in order, none twice
    with Store.open(db) as store:
        binding = store.bindings_of(sid)[0]
        assert binding.last_delivered_seq == n_events + 1


def test_processes_delivering_one_binding_at_once_write_each_event_once_in_order(
    tmp_path: Path,
) -> None:
    """Every process that opens the control plane resumes every binding, so several may
    deliver to one JSONL file at the same time (a host, a batch, a CLI command): the file
    still gets every event once, in order. Real processes, small batches to interleave."""
    db, sink = tmp_path / "cp.db", tmp_path / "sink.jsonl"
    _, expected = _bound_session_with_events(db, sink, 600)
    procs = [_driver("deliver", str(db), "3") for _ in range(4)]
    for proc in procs:
        assert proc.wait(120) == 0
    ids = [json.loads(line)["eventId"] for line in sink.read_text().splitlines()]
    assert len(ids) == len(set(ids)), "an event was written twice"
    assert ids == expected
