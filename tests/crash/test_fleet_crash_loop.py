"""The crash loop over a fleet: three control-plane drivers as separate processes on one
PostgreSQL database, all asking for the same idempotent work; one of them, picked at random,
is killed with SIGKILL at a random moment and restarted, many times; then all are left to
finish. The invariants are the SQLite crash loop's (tests/crash/test_crash_loop.py): every
command final, nothing completed ran again, every event log contiguous, every JSONL sink
holding its session's events exactly once in order, every session exporting a valid
transcript, no agent outliving its driver. Here a killed node's sessions are taken over by
the nodes still running, mid-turn, as well as by its own next life.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.crash.test_crash_loop import (
    Figures,
    _log,
    _recovery_counts,
    _seed,
    _start_driver,
    check_invariants,
)
from tests.support.postgres import PostgresServer

NODES = 3


def run_fleet_loop(
    work: Path, db: str, seed: int, kills: int, n_sessions: int, per_session: int
) -> Figures:
    rng = random.Random(seed)
    figures = Figures(seed, per_session=per_session)
    started = time.monotonic()
    drivers: dict[int, tuple[int, subprocess.Popen[bytes]]] = {}

    def start(slot: int) -> None:
        life = figures.lives
        figures.lives += 1
        drivers[slot] = (life, _start_driver(work, life, n_sessions, figures.per_session, db))

    def finished(life: int, proc: subprocess.Popen[bytes]) -> None:
        text = _log(work, life)
        _recovery_counts(text, figures)
        assert proc.returncode == 0 and "all-done" in text, text

    for slot in range(NODES):
        start(slot)
    try:
        while figures.kills < kills:
            time.sleep(rng.uniform(0.5, 3.0))
            slot = rng.randrange(NODES)
            life, proc = drivers[slot]
            killed = False
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                # 0: the driver finished between the poll and the signal (a finish, below).
                code = proc.wait(30)
                assert code in (-signal.SIGKILL, 0), code
                killed = code == -signal.SIGKILL
            if killed:
                _recovery_counts(_log(work, life), figures)
                figures.kills += 1
                figures.kills_by_mode["turns"] += 1
            else:
                # It finished: all the work is done. More, as a client adding work would.
                finished(life, proc)
                figures.per_session += max(10, figures.per_session // 2)
                figures.top_ups += 1
            start(slot)
        for life, proc in drivers.values():
            proc.wait(600)
            finished(life, proc)
    finally:
        for _, proc in drivers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    figures.runtime_s = time.monotonic() - started
    return figures


@pytest.mark.timeout(420)
def test_fleet_crash_loop(tmp_path: Path, postgres_server: PostgresServer) -> None:
    seed = _seed()
    print(f"fleet crash-loop seed={seed} (rerun with CRASH_LOOP_SEED={seed})")
    db = postgres_server.create_database(template="acpctl_template")
    n_sessions, per_session, kills = 6, 20, 9
    figures = run_fleet_loop(tmp_path, db, seed, kills, n_sessions, per_session)
    check_invariants(tmp_path, n_sessions, figures, db)
    print(figures.show())
    assert figures.kills == kills
    assert (
        figures.completed + figures.failed_budget + figures.interrupted_not_resent
        == figures.commands
    )
