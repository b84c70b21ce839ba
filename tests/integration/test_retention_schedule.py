"""The ``[retention]`` schedule: a control plane that runs sessions (serve, batch) runs the
gc in the background while it lives, says what it deleted in its log, and stops it when it
closes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from control_plane.config import load_config
from control_plane.retention.policy import RetentionPolicy, ScheduledGc
from store import Store
from tests.conftest import eventually
from tests.support.cp_harness import open_cp
from tests.support.retention_trees import all_gone, make_session


def _closed_tree(db: str) -> list[str]:
    with Store.open(db) as s:
        root = make_session(s, "idle", events=50)
        child = make_session(s, "closed", parent=root, events=50)
        s.close_session(root)
        return [root, child]


def test_a_control_plane_runs_the_schedule_and_stops_it_on_close(tmp_path: Path, db: str) -> None:
    tree = _closed_tree(db)
    with Store.open(db) as s:
        idle = make_session(s, "idle", events=3)  # not chosen: stays
    scheduled = ScheduledGc(RetentionPolicy("0s", archive_dir=tmp_path / "archive"), 0.2)
    cp = open_cp(tmp_path, db, retention=scheduled)
    try:
        eventually(lambda: all_gone(db, tree), timeout=20, what="the scheduled gc")
        schedule = cp._retention
        assert schedule is not None
        eventually(lambda: schedule.passes >= 2, timeout=20, what="a second pass")
        assert (tmp_path / "archive" / f"{tree[0]}.tar.gz").exists()
    finally:
        cp.close()
    assert not schedule._thread.is_alive()
    assert not all_gone(db, [idle])


def test_a_control_plane_without_the_section_runs_no_gc(tmp_path: Path) -> None:
    config = load_config(None, environ={"XDG_CONFIG_HOME": str(tmp_path)})
    assert not config.retention.enabled and config.retention.scheduled() is None
    assert config.runtime_settings().retention is None
    with open_cp(tmp_path) as cp:
        assert cp._retention is None


@pytest.mark.full  # a real serve and its agent: several seconds; the test above is the fast one
@pytest.mark.timeout(60)
def test_serve_applies_the_retention_section(tmp_path: Path, db: str) -> None:
    tree = _closed_tree(db)
    config = tmp_path / "config.toml"
    config.write_text('[retention]\nenabled = true\nolder_than = "0s"\ninterval = "1s"\n')
    log = tmp_path / "serve.log"
    argv = [sys.executable, "-m", "control_plane.cli", "--config", str(config), "--db", db]
    argv += ["serve", "--agent", "example"]
    with log.open("wb") as stderr:
        serve = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=tmp_path,
        )
        try:
            eventually(lambda: all_gone(db, tree), timeout=30, what="serve's scheduled gc")
            deadline = time.monotonic() + 10
            while b"retention: deleted tree" not in log.read_bytes():
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        finally:
            assert serve.stdin is not None
            serve.stdin.close()  # the client went away: serve ends
            code = serve.wait(30)
    assert code == 0, log.read_text()
    assert f"retention: deleted tree {tree[0]}: 2 sessions" in log.read_text()
