"""The crash loop with subagents: parents, children and announces under random kill -9.

End state after the last restart: every command final; each child run announced exactly
once (one `announce` event and one follow-up command per finished child prompt); no session
stuck in running/cancelling; contiguous event seqs; every export valid JSONL v3.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from control_plane import ControlPlane
from protocol.transcript.reader import validate_v3

PARENTS, CHILDREN, KILLS = 2, 4, 8


def _driver(tmp: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.subagent_crash_driver",
            str(tmp),
            str(PARENTS),
            str(CHILDREN),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ),
    )


@pytest.mark.timeout(300)
def test_subagent_crash_loop(tmp_path: Path) -> None:
    seed = int(os.environ.get("CRASH_SEED", time.time_ns() % 100_000))
    rng = random.Random(seed)
    print(f"subagent crash loop seed={seed}")
    kills = 0
    while kills < KILLS:
        proc = _driver(tmp_path)
        time.sleep(rng.uniform(0.5, 4.0))
        if proc.poll() is not None:
            break  # finished before this kill
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
    final = _driver(tmp_path)
    out, _ = final.communicate(timeout=240)
    assert final.returncode == 0 and "all-done" in out, (seed, out)

    conn = sqlite3.connect(tmp_path / "cp.db")
    states = Counter(r[0] for r in conn.execute("select state from commands"))
    assert set(states) <= {"completed", "failed", "cancelled", "interrupted"}, (seed, states)
    stuck = conn.execute(
        "select count(*) from sessions where state in ('running', 'cancelling')"
    ).fetchone()[0]
    assert stuck == 0
    for sid, last in conn.execute("select id, last_event_seq from sessions"):
        seqs = [
            r[0]
            for r in conn.execute("select seq from events where session_id=? order by seq", (sid,))
        ]
        assert seqs == list(range(1, last + 1)), sid
    child_runs = [
        r[0]
        for r in conn.execute(
            "select c.id from commands c join sessions s on s.id = c.session_id"
            " where s.parent_id is not null and c.kind = 'prompt'"
            " and c.state in ('completed', 'failed', 'cancelled', 'interrupted')"
        )
    ]
    announced = Counter(
        json.loads(r[0])["commandId"]
        for r in conn.execute("select payload from events where kind = 'announce'")
    )
    follow_ups = Counter(
        r[0][len("announce:") :]
        for r in conn.execute(
            "select idempotency_key from commands where idempotency_key like 'announce:%'"
        )
    )
    conn.close()
    assert len(child_runs) >= PARENTS * CHILDREN
    for run in child_runs:
        assert announced[run] == 1, (seed, run, announced[run])
        assert follow_ups[run] == 1, (seed, run)
    assert sum(announced.values()) == len(child_runs)
    with ControlPlane.open(tmp_path / "cp.db", run_sessions=False) as cp:
        for session in cp.list_sessions(limit=1000):
            validate_v3(cp.export_jsonl(session.id, tmp_path / f"{session.id}.jsonl"))
    print(f"subagent crash loop: seed={seed} kills={kills} commands={sum(states.values())}")
