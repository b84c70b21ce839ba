"""One control-plane node of a fleet test: a process that runs sessions on a shared store.

    python -m tests.support.node_driver DB WORKDIR NAME LABELS LEASE_S DISCOVER_S [stats]

LABELS is comma-separated (``-`` for none). Prints ``ready <owner id>`` once its node is
registered and it runs sessions, then serves until killed (or SIGTERM: an orderly stop).
On SIGUSR1 it prints ``counts <json>``: its listener's notifications by channel kind
(``SessionNotifications.counts``, store/listen.py), ``{}`` on SQLite.
With a seventh argument ``stats`` it also answers each line on stdin with one JSON line of
its counters (bench/nodes.py): PostgreSQL notifications heard (``received``, of them its
own commits' ``skipped``, and ``counts`` by channel kind) and its writer's commits, writes
and notifications sent.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path

from control_plane import ControlPlane
from store.ownership import this_owner
from tests.support.cp_harness import FAST


def _serve_stats(cp: ControlPlane) -> None:
    listener = cp._supervisor.notifications
    writer = cp._store._writer
    for _line in sys.stdin:
        counts = {
            "received": getattr(listener, "received", 0),
            "skipped": getattr(listener, "skipped", 0),
            "counts": {} if listener is None else dict(listener.counts),
            "batches": writer.batches,
            "writes": writer.writes,
            "notified": getattr(writer, "notified", 0),
        }
        print(json.dumps(counts), flush=True)


def main(argv: list[str]) -> int:
    db, work, name, labels, lease_s, discover_s = argv[:6]
    settings = replace(
        FAST,
        log_dir=str(Path(work) / f"logs-{name}"),
        node_name=name,
        node_labels=tuple(x for x in labels.split(",") if x and x != "-"),
        lease_s=float(lease_s),
        discover_interval_s=float(discover_s),
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with ControlPlane.open(db, settings=settings) as cp:
        listener = cp._supervisor.notifications
        signal.signal(
            signal.SIGUSR1,
            lambda *_: print(
                f"counts {json.dumps({} if listener is None else listener.counts)}", flush=True
            ),
        )
        if argv[6:7] == ["stats"]:
            threading.Thread(target=_serve_stats, args=(cp,), daemon=True).start()
        print(f"ready {this_owner()}", flush=True)
        while not done.wait(0.2):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
