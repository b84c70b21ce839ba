"""A transient storage fault (the write lock held by another process past ``lock_timeout``, a
full disk) wedges nothing and loses nothing: the control plane retries its writes until the
store takes them, in order, and every session carries on without a restart."""

# SQLite-only: faults injected into a SQLite file (its lock, a full disk, the file deleted).

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from control_plane import CommandState, ControlPlane, SessionState, StoreOptions
from tests.conftest import eventually
from tests.support.cp_harness import FAST, example_agent, noop_agent

HOLD_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


def _open(tmp: Path, db: Path, lock_timeout_s: float = 10.0) -> ControlPlane:
    settings = replace(FAST, log_dir=str(tmp / "logs"))
    return ControlPlane.open(db, StoreOptions(lock_timeout_s=lock_timeout_s), settings)


def _chunks_of(cp: ControlPlane, session_id: str, command_id: str) -> tuple[int, list[str]]:
    """How many message chunks the command's turn logged, and the kinds of its events in
    log order (the outcome must come after every update)."""
    events = [e for e in cp.events(session_id) if e.command_id == command_id]
    chunks = sum(
        1
        for e in events
        if e.kind == "session_update"
        and json.loads(e.raw)["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    )
    return chunks, [e.kind for e in events]


@pytest.mark.timeout(120)
def test_the_write_lock_held_past_lock_timeout_loses_no_update_and_wedges_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "cp.db"
    with _open(tmp_path, db, lock_timeout_s=0.5) as cp:
        spawned = cp.spawn(example_agent(tmp_path), tmp_path, "warm up", idempotency_key="s")
        assert spawned.command is not None
        assert cp.wait(spawned.command.id, 60).state is CommandState.COMPLETED
        sid = spawned.session.id
        turn = cp.prompt(sid, "#chunks=200 #delay=10 long")
        later = [cp.prompt(sid, f"#chunks=5 after {i}") for i in range(4)]  # queued behind it
        while cp.command(turn.id).state is not CommandState.RUNNING:
            time.sleep(0.01)
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(db), "2.5"], stdout=subprocess.PIPE, text=True
        )
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        assert holder.wait(30) == 0
        outcome = cp.wait(turn.id, 60)
        assert outcome.state is CommandState.COMPLETED
        chunks, kinds = _chunks_of(cp, sid, turn.id)
        assert chunks == 200  # not one update dropped
        assert kinds[-1] == "turn_ended"  # the outcome after all its updates
        for command in later:
            assert cp.wait(command.id, 60).state is CommandState.COMPLETED
            chunks, kinds = _chunks_of(cp, sid, command.id)
            assert chunks == 5 and kinds[-1] == "turn_ended"
        assert cp.get(sid).state is SessionState.IDLE


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    return done.returncode == 0


@contextlib.contextmanager
def mounted_small_disk(tmp_path: Path, keep_copy: bool = False) -> Iterator[Path]:
    """A 32 MiB tmpfs at ``tmp_path/disk`` (room for the store and its WAL: SQLite keeps up
    to ~4 MiB of WAL between checkpoints), unmounted afterwards; with ``keep_copy`` its files
    are first copied to ``tmp_path/disk-after`` for a failure's post-mortem (the tmpfs goes
    with the unmount). Skips where a tmpfs cannot be mounted."""
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "32m"):
        pytest.skip("mounting a small tmpfs needs root and mount(8) (a container may refuse)")
    try:
        yield disk
    finally:
        try:
            if keep_copy:
                shutil.copytree(
                    disk, tmp_path / "disk-after", ignore=shutil.ignore_patterns("filler", "*.sock")
                )
        finally:
            subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_small_disk(tmp_path) as disk:
        yield disk


def _fill(disk: Path) -> Path:
    """Take every free byte of ``disk`` (the file is what to delete to free it again)."""
    filler = disk / "filler"
    try:
        with filler.open("wb") as fh:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
    except OSError:  # full: the point (also when the store's writes filled it first)
        pass
    return filler


@pytest.mark.timeout(120)
def test_a_full_disk_for_a_while_wedges_no_session_and_the_work_finishes_after(
    tmp_path: Path, small_disk: Path
) -> None:
    db = small_disk / "cp.db"
    with _open(tmp_path, db) as cp:
        sessions = []
        for i in range(3):
            spawned = cp.spawn(example_agent(tmp_path), tmp_path, "hi", idempotency_key=f"s{i}")
            assert spawned.command is not None
            cp.wait(spawned.command.id, 60)
            sessions.append(spawned.session.id)
        # Queued, then the disk fills while their turns are claimed and stream: claims,
        # updates and outcomes are refused for a while (a host's own call would get a
        # StoreUnavailable meanwhile: that is its typed error).
        commands = [
            cp.prompt(sid, f"#chunks=20 #delay=20 full {n}") for sid in sessions for n in range(2)
        ]
        filler = _fill(small_disk)
        time.sleep(2.0)
        filler.unlink(missing_ok=True)
        for command in commands:
            outcome = cp.wait(command.id, 60)
            assert outcome.state is CommandState.COMPLETED, outcome
            chunks, kinds = _chunks_of(cp, command.session_id, command.id)
            assert chunks == 20 and kinds[-1] == "turn_ended"
        for sid in sessions:
            assert cp.get(sid).state is SessionState.IDLE
        # The store takes writes again: its fault clears at the next write that commits. (Not
        # read once: a write retried from the full window, such as a lease renewal, can still
        # be the last one refused when the turns end; seen once in CI.)
        eventually(lambda: cp.store_fault(0) is None, 20, "the store's fault to clear")


@pytest.mark.timeout(120)
def test_a_batch_on_a_disk_that_stays_full_exits_1_and_the_rerun_finishes(
    tmp_path: Path, small_disk: Path
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": f"t{i}", "prompt": f"p{i}"}) + "\n" for i in range(3))
    )
    config = tmp_path / "c.toml"
    config.write_text("[timeouts]\nstore_fault_s = 3\n")
    db = small_disk / "cp.db"
    cmd = [sys.executable, "-m", "control_plane.cli", "--db", str(db), "--config", str(config)]
    cmd += ["batch", str(tasks), "--agent", f"{sys.executable} -m protocol.example_agent"]
    # A store with the tasks submitted, then a disk with no room left.
    from store import Store

    Store.open(db).close()
    filler = _fill(small_disk)
    started = time.monotonic()
    full = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert full.returncode != 0, full.stderr[-2000:]
    assert time.monotonic() - started < 60  # it gave up instead of hanging
    filler.unlink(missing_ok=True)
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert again.returncode == 0, again.stderr[-2000:]
    results = [json.loads(x) for x in (tmp_path / "tasks.results.jsonl").read_text().splitlines()]
    assert sorted(r["status"] for r in results) == ["ok"] * 3


@pytest.mark.timeout(60)
def test_a_store_file_deleted_under_a_running_control_plane_refuses_writes_loudly(
    tmp_path: Path,
) -> None:
    """SQLite goes on writing into an unlinked file: every write acknowledged after the
    delete would be gone at the next open. The writer notices and refuses instead."""
    from state_machines import StoreError

    db = tmp_path / "cp.db"
    with _open(tmp_path, db) as cp:
        spawned = cp.spawn(noop_agent(), tmp_path, "hi", idempotency_key="s")
        assert spawned.command is not None
        cp.wait(spawned.command.id, 60)
        for side in tmp_path.glob("cp.db*"):
            side.unlink()
        with pytest.raises(StoreError, match="deleted or replaced"):
            cp.prompt(spawned.session.id, "after the delete")
        assert cp.store_fault(3600) is not None  # a batch would stop at once


@pytest.mark.timeout(60)
def test_a_close_the_store_refuses_is_reported_not_taken_for_done(tmp_path: Path) -> None:
    """The live actor's close failed (the lock held elsewhere past lock_timeout): the caller
    gets the store's error, and a close retried once the lock is gone closes the session."""
    from control_plane import StoreUnavailable

    db = tmp_path / "cp.db"
    with _open(tmp_path, db, lock_timeout_s=0.5) as cp:
        spawned = cp.spawn(noop_agent(), tmp_path, "hi", idempotency_key="s")
        assert spawned.command is not None
        assert cp.wait(spawned.command.id, 60).state is CommandState.COMPLETED
        sid = spawned.session.id
        assert sid in cp.live_sessions()  # the close goes through its actor
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(db), "3"], stdout=subprocess.PIPE, text=True
        )
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreUnavailable):
            cp.close_session(sid)
        assert cp.get(sid).state is not SessionState.CLOSED
        assert holder.wait(30) == 0
        assert cp.close_session(sid).state is SessionState.CLOSED
