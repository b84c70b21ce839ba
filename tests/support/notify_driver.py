"""A control-plane process for the webhook kill tests: one session, ``TURNS`` turns of the
noop agent (idempotent keys: a rerun adds none), a ``[[notify]]`` hook for ``turn_ended``
signed with ``$HOOK_SECRET``; prints the turn ends' event ids once every turn has ended,
then delivers until killed.

    python -m tests.support.notify_driver WORK URL TURNS [DB]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from state_machines.event_kinds import EventKind
from tests.support.cp_harness import noop_agent, open_cp
from tests.support.notify_hooks import fast, hook_to


def main(argv: list[str]) -> int:
    work, url, turns = Path(argv[0]).resolve(), argv[1], int(argv[2])
    db = argv[3] if len(argv) > 3 else None
    hook = hook_to(url, name="kill", events=("turn_ended",), secret_env="HOOK_SECRET")
    with open_cp(work, db=db, **fast(hook)) as cp:
        sid = cp.spawn(noop_agent(), work, idempotency_key="notify-driver").session.id
        commands = [cp.prompt(sid, f"turn {n}", idempotency_key=f"t{n}") for n in range(turns)]
        for command in commands:
            cp.wait(command.id, 60)
        ids = [str(e.id) for e in cp.events(sid) if e.kind == EventKind.TURN_ENDED]
        print("ended " + ",".join(ids), flush=True)
        time.sleep(3600)  # delivering; the test kills us
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
