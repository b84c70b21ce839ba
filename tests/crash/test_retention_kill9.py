"""``acpctl gc`` killed (kill -9) at random moments while it deletes many events: after
each kill the store is consistent, and a gc run to its end leaves nothing of the trees.
The seed is printed; ``RETENTION_KILL_SEED`` replays it."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from store import Store
from store.faults import ENV_VAR
from tests.support.direct_sql import query
from tests.support.retention_trees import acpctl, all_gone, consistent, make_session

KILLS = 4


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACPCTL_")}
    env.pop(ENV_VAR, None)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "no-config")
    return env


def _events(db: str) -> int:
    return int(query(db, "SELECT count(*) FROM events")[0][0])


def test_gc_killed_at_random_moments_then_run_to_the_end(tmp_path: Path) -> None:
    seed = int(os.environ.get("RETENTION_KILL_SEED", random.randrange(1 << 30)))
    print(f"RETENTION_KILL_SEED={seed}")
    rng = random.Random(seed)
    db = str(tmp_path / "cp.db")
    ids: list[str] = []
    with Store.open(db) as s:
        for _ in range(3):
            root = make_session(s, "idle", events=40_000, payload_bytes=100)
            ids += [root, make_session(s, "closed", parent=root, events=10_000)]
            s.close_session(root)
        keep = make_session(s, "idle", events=100)  # idle: not chosen, never touched
    archive = tmp_path / "archive"
    argv = [sys.executable, "-m", "control_plane.cli", "--db", db, "gc", "--older-than", "0s"]
    argv += ["--archive", str(archive)]
    for kill in range(KILLS):
        before = _events(db)
        proc = subprocess.Popen(argv, env=_env(tmp_path), stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while _events(db) == before and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # deleting has begun (the archive comes first)
        time.sleep(rng.uniform(0, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert consistent(db) == [], f"kill {kill}, seed {seed}"
    done = acpctl(db, "gc", "--older-than", "0s", "--archive", str(archive), env=_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert all_gone(db, ids), f"seed {seed}"
    assert consistent(db) == []
    assert query(db, "SELECT count(*) FROM events WHERE session_id = ?", (keep,)) == [(101,)]
    for path in archive.glob("*.tar.gz"):
        check = subprocess.run(["sha256sum", "-c", f"{path.name}.sha256"], cwd=archive)
        assert check.returncode == 0, path
    assert not list(archive.glob(".*")), "temporary files left behind"
