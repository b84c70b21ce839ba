"""A process that owns idle sessions until it is killed (tests/integration/test_dead_owners.py).

    python -m tests.support.idle_owner_driver WORKDIR DB COUNT

Opens ``open_cp(WORKDIR, DB)`` with passivation put off for an hour, spawns COUNT sessions
of the no-op agent, each with one prompt, waits until every turn has ended, and prints::

    owner <this process's owner id>
    session <id>          (COUNT lines)
    idle

then keeps them (actors, agents, ownership) until it is killed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from control_plane import CommandState
from store.ownership import this_owner
from tests.support.cp_harness import noop_agent, open_cp


def main(argv: list[str]) -> int:
    work, db, count = Path(argv[0]).resolve(), argv[1], int(argv[2])
    with open_cp(work, db=db, passivate_after_s=3600.0) as cp:
        print(f"owner {this_owner()}", flush=True)
        commands = []
        for i in range(count):
            spawned = cp.spawn(noop_agent(), work, f"hello {i}", idempotency_key=f"idle-{i}")
            assert spawned.command is not None
            commands.append(spawned.command.id)
            print(f"session {spawned.session.id}", flush=True)
        for command_id in commands:
            assert cp.wait(command_id, 60).state is CommandState.COMPLETED
        print("idle", flush=True)
        time.sleep(3600)  # hold them until the test kills us
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
