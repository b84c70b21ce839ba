"""bench/nodes.py part (c): 1, 2 and 3 node processes (``tests.support.node_driver``) on one
PostgreSQL database, each node with sessions of its own (placement pins each to one node, so
each node's agents are its own), driven by one client process (the bench itself).

Per run, in order:

1. *Notifications per enqueue*: every session is given a turn that waits (the no-op agent's
   ``#hang``); once all run, one prompt per session is queued behind it. Nothing else is
   written then, so what the nodes' LISTEN connections received meanwhile (the nodes'
   ``SessionNotifications.received``, read from each node) is what the enqueues cost.
   The hanging turns are then cancelled and the queued prompts run.
2. *Latency*: waves of one prompt per session, each wave after the last finished; a prompt's
   enqueue-to-start (its ``started_at`` minus its ``created_at``). Over the waves also the
   notifications received per turn, and per notifying commit of the nodes' writers (what
   the turns' commits sent: one per session per group commit that appended to it or
   finished one of its commands), the enqueues' share taken off.
3. *Throughput*: every session's prompts queued at once; commands completed per second
   while the fleet drains them, and the CPU that took, from ``/proc``: the node processes
   with their agents, the PostgreSQL server's processes, this client, and the whole machine
   (other users of it included).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, replace
from typing import IO, Any

from bench._common import REPO_ROOT, child_env, now
from bench.proc_sampling import descendants, proc_table
from protocol.example_agent import noop
from store import AgentSpec

NOOP = AgentSpec("noop-agent", noop.command())
_TICK = os.sysconf("SC_CLK_TCK")


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# -- CPU from /proc ------------------------------------------------------------------------


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids``, with their children already waited for."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / _TICK


def _machine_busy_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, every core summed."""
    with open("/proc/stat", encoding="ascii") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    total = sum(values[:8])
    return (total - idle) / _TICK, total / _TICK


def server_cpu_s(postmaster: int | None) -> float:
    """CPU seconds of a PostgreSQL server's processes (0 for none)."""
    if postmaster is None:
        return 0.0
    return _cpu_s([postmaster, *descendants(postmaster, proc_table())])


@dataclass
class CpuSample:
    nodes: float
    postgres: float
    client: float
    busy: float
    total: float


def _cpu_sample(node_pids: list[int], postmaster: int) -> CpuSample:
    table = proc_table()
    node_tree = [p for pid in node_pids for p in [pid, *descendants(pid, table)]]
    busy, total = _machine_busy_s()
    return CpuSample(
        _cpu_s(node_tree),
        _cpu_s([postmaster, *descendants(postmaster, table)]),
        _cpu_s([os.getpid()]),
        busy,
        total,
    )


# -- the nodes -----------------------------------------------------------------------------


@dataclass
class _Node:
    proc: subprocess.Popen[str]

    def stats(self) -> dict[str, int]:
        stdin: IO[str] | None = self.proc.stdin
        stdout: IO[str] | None = self.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write("stats\n")
        stdin.flush()
        line: dict[str, Any] = json.loads(stdout.readline())
        # The listener's deliveries by channel kind (work, unowned, session, own) as
        # ``heard_<kind>``, beside the flat totals.
        by_kind: dict[str, int] = line.pop("counts", {})
        counts: dict[str, int] = {**line, **{f"heard_{k}": v for k, v in by_kind.items()}}
        return counts


def _stats(nodes: list[_Node]) -> dict[str, int]:
    summed: dict[str, int] = {}
    for node in nodes:
        for key, value in node.stats().items():
            summed[key] = summed.get(key, 0) + value
    return summed


def _delta(after: dict[str, int], before: dict[str, int], key: str) -> int:
    return after.get(key, 0) - before.get(key, 0)


def _start_nodes(db: str, count: int, work: str) -> list[_Node]:
    env = child_env(work)
    nodes: list[_Node] = []
    for i in range(count):
        argv = [db, work, f"n{i}", "-", "15", "0.5", "stats"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.node_driver", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=REPO_ROOT,
        )
        nodes.append(_Node(proc))
        assert proc.stdout is not None
        if not proc.stdout.readline().startswith("ready"):
            raise RuntimeError("a node did not start")
    return nodes


def _stop_nodes(nodes: list[_Node]) -> None:
    for node in nodes:
        node.proc.terminate()
    for node in nodes:
        try:
            node.proc.wait(30)
        except subprocess.TimeoutExpired:
            node.proc.kill()


def _wait_all(cp: Any, ids: list[str], timeout: float) -> None:
    for command_id in ids:
        if not cp.wait(command_id, timeout).ok:
            raise RuntimeError("a prompt failed")


def _until_running(cp: Any, session_ids: list[str], timeout: float = 60) -> None:
    from state_machines import SessionState

    deadline = time.monotonic() + timeout
    waiting = list(session_ids)
    while waiting:
        waiting = [s for s in waiting if cp.get(s).state is not SessionState.RUNNING]
        if waiting and time.monotonic() > deadline:
            raise RuntimeError(f"{len(waiting)} hanging turns did not start")
        time.sleep(0.05)


def _serialization_failures(server_log: str | None, since: int) -> int:
    """Transactions the server refused under serializable isolation (each one a group that
    ran again after a jittered wait: store/retry.py), from its log after byte ``since``."""
    if server_log is None:
        return 0
    with open(server_log, "rb") as log:
        log.seek(since)
        return log.read().count(b"could not serialize access")


def run_fleet(
    db: str,
    count: int,
    per_node: int,
    waves: int,
    work: str,
    postmaster: int,
    server_log: str | None = None,
) -> dict[str, float]:
    """One fleet of ``count`` nodes, ``per_node`` sessions pinned to each; see the module
    docstring for what is measured. With the server's log, also the serialization failures
    per command."""
    log_start = os.path.getsize(server_log) if server_log else 0
    commands = 0
    from control_plane import ControlPlane
    from store.placement import Placement
    from tests.support.cp_harness import FAST

    nodes = _start_nodes(db, count, work)
    try:
        settings = replace(FAST, log_dir=os.path.join(work, "logs-client"))
        with ControlPlane.open(db, settings=settings, run_sessions=False) as cp:
            tag = uuid.uuid4().hex[:6]
            spawned = [
                cp.spawn(
                    NOOP,
                    work,
                    "hello",
                    idempotency_key=f"{tag}{i}",
                    placement=Placement(node=f"n{i % count}"),
                )
                for i in range(per_node * count)
            ]
            sids = [s.session.id for s in spawned]
            _wait_all(cp, [s.command.id for s in spawned if s.command is not None], 120)
            result = _notifications_per_enqueue(cp, nodes, sids)
            result.update(_waves(cp, nodes, sids, waves, result["notifications_per_enqueue"]))
            result.update(_burst(cp, nodes, sids, waves, postmaster))
            result["nodes_owning_sessions"] = float(len({cp.get(s).owner for s in sids}))
            commands = len(
                cp._store.read(lambda c: c.exec_driver_sql("SELECT id FROM commands").all())
            )
        failures = _serialization_failures(server_log, log_start)
        result["serialization_failures_per_command"] = failures / commands
        return result
    finally:
        _stop_nodes(nodes)


def _notifications_per_enqueue(cp: Any, nodes: list[_Node], sids: list[str]) -> dict[str, float]:
    hanging = [cp.prompt(s, "#hang").id for s in sids]
    _until_running(cp, sids)
    time.sleep(0.3)  # what the hanging turns' start sent is heard before the count
    before = _stats(nodes)
    queued = [cp.prompt(s, "queued behind the hang").id for s in sids]
    time.sleep(1.0)  # the notifications arrive within milliseconds; a margin
    after = _stats(nodes)
    for s in sids:
        cp.cancel(s)
    _wait_all(cp, queued, 120)
    for command_id in hanging:
        cp.wait(command_id, 60)  # cancelled: not ok, but final
    return {
        "notifications_per_enqueue": _delta(after, before, "received") / len(sids),
        # The nodes' own commits in that second (expected none: nothing ran).
        "node_notifications_sent_while_enqueueing": float(_delta(after, before, "notified")),
    }


def _waves(
    cp: Any, nodes: list[_Node], sids: list[str], waves: int, per_enqueue: float
) -> dict[str, float]:
    before = _stats(nodes)
    ids: list[str] = []
    for wave in range(waves):
        batch = [cp.prompt(s, f"wave {wave}").id for s in sids]
        _wait_all(cp, batch, 120)
        ids += batch
    time.sleep(0.5)
    after = _stats(nodes)
    delays = []
    for command_id in ids:
        record = cp.command(command_id)
        assert record.started_at is not None
        delays.append((record.started_at - record.created_at).total_seconds())
    received = _delta(after, before, "received")
    sent = _delta(after, before, "notified")
    return {
        "enqueue_to_start_p50_ms": _p(delays, 0.5) * 1000,
        "enqueue_to_start_p99_ms": _p(delays, 0.99) * 1000,
        "notifications_per_turn": received / len(ids),
        "notifying_commits_per_turn": sent / len(ids),
        "notifications_per_streaming_commit": (
            (received - per_enqueue * len(ids)) / sent if sent else float("nan")
        ),
        "node_write_tx_per_turn": _delta(after, before, "batches") / len(ids),
    }


def _burst(
    cp: Any, nodes: list[_Node], sids: list[str], waves: int, postmaster: int
) -> dict[str, float]:
    node_pids = [n.proc.pid for n in nodes]
    cpu0 = _cpu_sample(node_pids, postmaster)
    start = now()
    burst = [cp.prompt(s, f"burst {i}").id for i in range(waves) for s in sids]
    _wait_all(cp, burst, 300)
    elapsed = now() - start
    cpu1 = _cpu_sample(node_pids, postmaster)
    done = len(burst)
    cores = os.cpu_count() or 1
    busy = cpu1.busy - cpu0.busy
    ours = sum(getattr(cpu1, k) - getattr(cpu0, k) for k in ("nodes", "postgres", "client"))
    return {
        "commands_per_s": done / elapsed,
        "cpu_ms_per_command_nodes": (cpu1.nodes - cpu0.nodes) * 1000 / done,
        "cpu_ms_per_command_postgres": (cpu1.postgres - cpu0.postgres) * 1000 / done,
        "cpu_ms_per_command_client": (cpu1.client - cpu0.client) * 1000 / done,
        # Share of the machine's cores busy during the burst, and of that what was not ours
        # (other users of the machine).
        "machine_busy_share": busy / (cpu1.total - cpu0.total),
        "machine_cores": float(cores),
        "others_cpu_cores": max(0.0, busy - ours) / elapsed,
    }
