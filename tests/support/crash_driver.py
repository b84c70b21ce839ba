"""A child process for kill -9 tests: does one durable thing, reports it, then waits to be
killed (or is killed earlier by an armed fault point, see store/faults.py).

    python -m tests.support.crash_driver spawn DB KEY SINK
    python -m tests.support.crash_driver enqueue DB SESSION KEY
    python -m tests.support.crash_driver deliver DB BATCH
"""

from __future__ import annotations

import sys
import time

from control_plane import ControlPlane
from store import BindingSpec, CommandKind, SinkKind, Store
from tests.conftest import AGENT


def main(argv: list[str]) -> int:
    action, db = argv[0], argv[1]
    if action == "spawn":
        key, sink = argv[2], argv[3]
        with Store.open(db) as store:
            result = store.spawn(
                AGENT,
                "/w",
                BindingSpec(SinkKind.JSONL, sink),
                [{"type": "text", "text": "go"}],
                key,
            )
            print(f"acked {result.session.id}", flush=True)
            time.sleep(60)  # the test kills us here
    elif action == "enqueue":
        session_id, key = argv[2], argv[3]
        with Store.open(db) as store:
            cmd = store.enqueue(session_id, CommandKind.PROMPT, {"content": []}, key).command
            print(f"acked {cmd.id}", flush=True)
            time.sleep(60)
    elif action == "deliver":
        with ControlPlane.open(db, delivery_batch=int(argv[2]), run_sessions=False) as cp:
            if not cp.wait_delivered(timeout=30):
                return 3
            print("caught-up", flush=True)
    else:
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
