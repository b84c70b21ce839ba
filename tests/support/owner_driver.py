"""Process A of the two-process test: owns a session and runs a long turn until killed.

    python -m tests.support.owner_driver WORKDIR DB [PROMPT]

Opens ``tests.support.cp_harness.open_cp(WORKDIR, DB)`` (DB: a SQLite file or a PostgreSQL
URL, the test's ``db``), spawns one session running the example agent with PROMPT (default
``#chunks=40 #delay=100 a``, about 4 s), and prints, one per line, as each becomes known::

    owner <this process's owner id>
    session <session id>
    command <the first prompt's command id>
    agent <the agent's pid>
    running
    answering

(``answering``: the first chunk of the agent's answer is stored, so the agent had the prompt:
a test that kills A from then on cuts the turn off mid-answer, never before the prompt
reached the agent), then keeps running (serving the session) until it is killed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from control_plane import CommandState
from store import EventRecord
from store.ownership import this_owner
from tests.conftest import eventually
from tests.support.cp_harness import example_agent, open_cp

DEFAULT_PROMPT = "#chunks=40 #delay=100 a"


def _answer_chunks(events: list[EventRecord], command_id: str) -> list[EventRecord]:
    # A chunk of the answer, not any update: an agent may send its slash commands unasked.
    return [
        e
        for e in events
        if e.kind == "session_update"
        and e.command_id == command_id
        and e.payload.get("params", {}).get("update", {}).get("sessionUpdate")
        == "agent_message_chunk"
    ]


def main(argv: list[str]) -> int:
    work, db = Path(argv[0]).resolve(), argv[1]
    prompt = argv[2] if len(argv) > 2 else DEFAULT_PROMPT
    flags = argv[3:]  # the example agent's, e.g. --no-resume
    with open_cp(work, db=db) as cp:
        spawned = cp.spawn(example_agent(work, *flags), work, prompt, idempotency_key="owned-by-a")
        assert spawned.command is not None
        sid, command_id = spawned.session.id, spawned.command.id
        print(f"owner {this_owner()}", flush=True)
        print(f"session {sid}", flush=True)
        print(f"command {command_id}", flush=True)
        started = eventually(lambda: [e for e in cp.events(sid) if e.kind == "agent_started"], 60)
        print(f"agent {started[0].payload['pid']}", flush=True)
        eventually(lambda: cp.command(command_id).state is CommandState.RUNNING, 60)
        print("running", flush=True)
        eventually(lambda: _answer_chunks(cp.events(sid), command_id), 60)
        print("answering", flush=True)
        time.sleep(3600)  # serve the session until the test kills us
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
