"""A database file that is not usable gives a clear StoreError and stays untouched."""

# SQLite-only: bad, corrupt, locked, read-only or truncated SQLite files.

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from state_machines import StoreError
from store import CommandKind, IntegrityCheck, Store, StoreOptions
from tests.conftest import AGENT


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_non_sqlite_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 100)
    before = _digest(path)
    with pytest.raises(StoreError) as info:
        Store.open(path)
    assert "not an SQLite database" in str(info.value)
    assert info.value.path == str(path)
    assert _digest(path) == before
    assert sorted(os.listdir(tmp_path)) == ["notes.db"]  # no -wal or -shm files appeared


def _make_store_with_data(path: Path) -> None:
    with Store.open(path) as store:
        for i in range(200):
            store.spawn(AGENT, "/w", None, [{"type": "text", "text": "x" * 500}], f"k{i}")
    # fold the WAL into the main file so corruption below hits real pages
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()


def test_corrupt_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "cp.db"
    _make_store_with_data(path)
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 8 * page
    data[3 * page : 6 * page] = os.urandom(3 * page)  # garbage over b-tree pages
    path.write_bytes(bytes(data))
    before = _digest(path)
    with pytest.raises(StoreError) as info:
        Store.open(path, StoreOptions(integrity_check=IntegrityCheck.QUICK))
    assert "corrupt" in str(info.value)
    assert _digest(path) == before


def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as info:
        Store.open(tmp_path / "no" / "such" / "cp.db")
    assert "does not exist" in str(info.value)


_HOLD_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""


def _hold_write_lock(path: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_write_lock_held_by_another_process_is_retried_until_released(tmp_path: Path) -> None:
    path = tmp_path / "cp.db"
    with Store.open(path, StoreOptions(lock_timeout_s=10)) as store:
        sid = store.spawn(AGENT, "/w", None, None, "s").session.id
        holder = _hold_write_lock(path, 0.7)
        started = time.monotonic()
        cmd = store.enqueue(sid, CommandKind.PROMPT, {"content": []}, "after-lock").command
        waited = time.monotonic() - started
        holder.wait(5)
        assert waited >= 0.3  # it really waited for the other process
        assert store.get_command(cmd.id).seq == 1


def test_write_lock_held_too_long_gives_store_error_and_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "cp.db"
    with Store.open(path, StoreOptions(lock_timeout_s=0.8)) as store:
        sid = store.spawn(AGENT, "/w", None, None, "s").session.id
        holder = _hold_write_lock(path, 3.0)
        try:
            with pytest.raises(StoreError) as info:
                store.enqueue(sid, CommandKind.PROMPT, {"content": []}, "blocked")
            assert "locked by another process" in str(info.value)
        finally:
            holder.kill()
            holder.wait()
        # the store keeps working once the lock is gone, and the refused write left no trace
        assert store.commands_of(sid) == []
        store.enqueue(sid, CommandKind.PROMPT, {"content": []}, "blocked")
        assert len(store.commands_of(sid)) == 1


def test_open_while_another_process_holds_the_write_lock_can_still_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cp.db"
    with Store.open(path) as store:
        store.spawn(AGENT, "/w", None, None, "s")
    holder = _hold_write_lock(path, 3.0)
    try:
        # A store at the head revision opens without taking the write lock (WAL readers are
        # never blocked); only its writes wait for the other process.
        with Store.open(path, StoreOptions(lock_timeout_s=0.5)) as store:
            assert len(store.list_sessions()) == 1
    finally:
        holder.kill()
        holder.wait()


def test_a_directory_named_as_the_store_is_a_clear_error(tmp_path: Path) -> None:
    from state_machines import StoreError
    from store import Store

    with pytest.raises(StoreError, match="is a directory; --db names the store file"):
        Store.open(tmp_path)


def test_a_store_on_read_only_media_is_a_clear_error_not_corrupt(tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess

    from state_machines import StoreError
    from store import Store

    media = tmp_path / "media"
    media.mkdir()
    mounted = os.geteuid() == 0 and shutil.which("mount") is not None
    mounted = (
        mounted
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(media)], capture_output=True
        ).returncode
        == 0
    )
    if not mounted:
        pytest.skip("needs root and mount(8) to make read-only media (a container may refuse)")
    try:
        Store.open(media / "cp.db").close()
        subprocess.run(["mount", "-o", "remount,ro", str(media)], check=True)
        before = (media / "cp.db").read_bytes()
        with pytest.raises(StoreError, match="read-only file system"):
            Store.open(media / "cp.db")
        assert (media / "cp.db").read_bytes() == before
    finally:
        subprocess.run(["umount", "-l", str(media)], check=False)


@pytest.mark.timeout(60)
def test_a_store_truncated_under_a_running_control_plane_gives_typed_errors(
    tmp_path: Path,
) -> None:
    """A file cut short while open: every read and write path raises ``StoreDamaged`` (not
    the driver's raw ``DatabaseError``), writes stay refused, and close still works."""
    import asyncio
    import sqlite3
    from dataclasses import replace

    from control_plane import ControlPlane, StoreDamaged
    from store.async_reads import AsyncReader
    from tests.support.cp_harness import FAST, noop_agent

    db = tmp_path / "cp.db"
    cp = ControlPlane.open(db, StoreOptions(), replace(FAST, log_dir=str(tmp_path / "logs")))
    try:
        spawned = cp.spawn(noop_agent(), tmp_path, "hi", idempotency_key="s")
        assert spawned.command is not None
        cp.wait(spawned.command.id, 60)
        fold = sqlite3.connect(db)
        fold.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        fold.close()
        with open(db, "r+b") as fh:
            fh.truncate(8192)  # keeps the header: only the pages behind it are gone
        session_id = spawned.session.id
        for call in (
            lambda: cp.get(session_id),
            lambda: cp.events(session_id),
            lambda: cp.wait(spawned.command.id, 5),
            lambda: cp.prompt(session_id, "after the cut"),
        ):
            with pytest.raises(StoreDamaged, match="is damaged"):
                call()
        assert isinstance(cp.store_fault(3600), StoreDamaged)  # a batch stops
        reader = AsyncReader(str(db))

        async def read_async() -> None:
            try:
                await reader.events_after(session_id)
            finally:
                await reader.aclose()

        with pytest.raises(StoreDamaged):
            asyncio.run(read_async())
    finally:
        cp.close()
