"""PostgreSQL: a node stopped in the middle of a write transaction (SIGSTOP) does not hold
its row locks past its lease. The server ends the transaction once it has been idle for
``StoreOptions.stalled_write_s`` (a node's lease); the other writer then gets the row, and
the stopped one, continued, has that write refused and the next one taken on a new
connection. Before, the server waited 30 s: the fleet test's takeover of a stopped node's
session missed its 23.5 s bound whenever the SIGSTOP landed inside a transaction."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid

import pytest

from store import Store, StoreOptions
from store.ops import nodes as node_ops
from tests.support.direct_sql import query
from tests.support.postgres import PostgresServer

STALLED_WRITE_S = 1.0


def _line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0] == "T"


@pytest.mark.timeout(60)
def test_a_writer_stopped_mid_transaction_holds_its_row_for_no_longer_than_its_lease(
    postgres_server: PostgresServer,
) -> None:
    db = postgres_server.create_database(template="acpctl_template")
    node_id = f"stalled-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.stalled_writer", db, node_id, str(STALLED_WRITE_S)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert _line(proc) == "ready"
        assert _line(proc) == "locked"  # inside its transaction, the row locked
        proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 20
        while not _stopped(proc.pid):
            assert time.monotonic() < deadline, "the writer did not stop"
            time.sleep(0.02)
        # Another writer (its lock wait retried up to 10 s) wants the same row.
        started = time.monotonic()
        with Store.open(db, StoreOptions(lock_timeout_s=10.0)) as other:
            other.write(lambda ctx: node_ops.renew(ctx, node_id, 600.0, 2))
        waited = time.monotonic() - started
        print(f"the row was free after {waited:.2f} s (stalled_write_s {STALLED_WRITE_S})")
        assert waited < 8.0
        proc.send_signal(signal.SIGCONT)
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert _line(proc).startswith("first refused StoreUnavailable")
        assert _line(proc) == "second ok"
        assert proc.wait(30) == 0
        ((running,),) = query(db, "SELECT running FROM nodes WHERE id = ?", (node_id,))
        assert running == 3  # the other writer's 2, then the continued one's second write
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(10)
