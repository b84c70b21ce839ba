"""Driver for the subagent crash loop: parents fan out to children (mode=run) through the
API with stable keys, so a restarted driver re-submits the same tree idempotently; then it
waits for every command to end and prints "all-done".

    python -m tests.support.subagent_crash_driver TMP PARENTS CHILDREN
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from state_machines import COMMAND_MACHINE
from tests.support.cp_harness import example_agent, open_cp

FINAL = COMMAND_MACHINE.final


def main(tmp: Path, parents: int, children: int) -> None:
    with open_cp(tmp, max_running_turns=4, max_running_children=2) as cp:
        agent = example_agent(tmp)
        for p in range(parents):
            root = cp.spawn(agent, tmp, f"parent {p}", idempotency_key=f"p{p}").session.id
            for c in range(children):
                cp.spawn(
                    agent,
                    tmp,
                    f"#chunks=4 #delay=40 p{p}-c{c}",
                    parent=root,
                    mode="run",
                    idempotency_key=f"p{p}-c{c}",
                )
        while True:
            sessions = cp.list_sessions(limit=10_000)
            commands = [c for s in sessions for c in cp.commands(s.id)]
            announced = sum(
                1
                for s in sessions
                if s.parent_id is None
                for e in cp.events(s.id)
                if e.kind == "announce"
            )
            if all(c.state in FINAL for c in commands) and announced >= parents * children:
                break
            time.sleep(0.2)
        cp.wait_delivered(30)
        print("all-done", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
