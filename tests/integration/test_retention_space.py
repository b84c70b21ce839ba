"""SQLite's space after a gc: a store with incremental vacuum gives the freed pages back to
the file system; an older one (auto_vacuum NONE) keeps them for reuse and says so, until
``acpctl gc --compact`` rewrites it, which it refuses while another process has the store
open."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from control_plane.cli import app
from store import Store
from tests.support.retention_trees import all_gone, make_session

runner = CliRunner()


def _gc(db: str, *args: str) -> tuple[int, Any]:
    result = runner.invoke(app, ["--db", db, "gc", "--older-than", "0s", *args, "--json"], env={})
    try:
        return result.exit_code, json.loads(result.output)
    except json.JSONDecodeError:
        return result.exit_code, result.output


def _seed(db: str) -> list[str]:
    """About 4 MB of events in closed trees, and a little that stays."""
    with Store.open(db) as s:
        ids = [make_session(s, "closed", events=2000, payload_bytes=1000) for _ in range(2)]
        make_session(s, "idle", events=10)
    return ids


def _auto_vacuum(db: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("PRAGMA auto_vacuum").fetchone()[0])
    finally:
        conn.close()


def test_a_new_store_gives_the_freed_space_back(db_path: Path) -> None:
    db = str(db_path)
    ids = _seed(db)
    assert _auto_vacuum(db) == 2  # INCREMENTAL, as every store made since 0012

    code, report = _gc(db)

    assert code == 0, report
    assert all_gone(db, ids)
    space = report["space"]
    assert space["reclaim"] == "incremental-vacuum" and space["note"] == ""
    assert space["before"]["fileBytes"] > 4_000_000
    assert space["after"]["fileBytes"] < space["before"]["fileBytes"] / 4
    assert space["after"]["freeBytes"] == 0
    assert os.path.getsize(db) == space["after"]["fileBytes"]


def _make_old(db: str) -> None:
    """What a store created before 0012 is: auto_vacuum NONE."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA auto_vacuum = NONE")
        conn.execute("VACUUM")
    finally:
        conn.close()
    assert _auto_vacuum(db) == 0


def test_an_older_store_keeps_free_pages_until_compacted_alone(db_path: Path) -> None:
    db = str(db_path)
    ids = _seed(db)
    _make_old(db)

    code, report = _gc(db)

    assert code == 0, report
    assert all_gone(db, ids)
    space = report["space"]
    assert space["reclaim"] == "reused" and "--compact" in space["note"]
    assert space["after"]["freeBytes"] > 3_500_000  # free inside the file, not given back
    assert space["after"]["fileBytes"] >= space["before"]["fileBytes"]

    # The store is open elsewhere (here a Store of this process: SQLite's locks are the
    # same between processes and between connections of one): refused, nothing changed.
    with Store.open(db) as holder:
        holder.list_sessions()
        code, output = _gc(db, "--compact")
        assert code == 2, output
        assert "needs the store to itself" in output
        assert _auto_vacuum(db) == 0

    code, report = _gc(db, "--compact")

    assert code == 0, report
    assert report["compacted"] and _auto_vacuum(db) == 2
    after = report["space"]["after"]
    assert after["freeBytes"] == 0 and after["fileBytes"] < 1_000_000
    assert report["space"]["reclaim"] == "incremental-vacuum"
    # The store still works, and later deletions give their space back.
    with Store.open(db) as s:
        assert len(s.list_sessions()) == 1


def test_compact_is_for_sqlite_stores(tmp_path: Path) -> None:
    code, output = _gc("postgresql://nobody@127.0.0.1:1/none", "--compact")
    assert code == 2 and "SQLite" in output
