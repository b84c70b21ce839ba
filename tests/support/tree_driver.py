"""A control-plane process for the agent-tree tests: spawns a session whose agent starts
children (one in a new session, as ``setsid`` would) that write a file once told to, runs a
turn that hangs, reports, then waits to be killed.

    python -m tests.support.tree_driver WORK [DB]
"""

from __future__ import annotations

import errno
import os
import shlex
import sys
import time
from pathlib import Path

from control_plane import CommandState, ControlPlane
from store import AgentSpec
from tests.support.cp_harness import open_cp


def tree_agent(work: Path) -> AgentSpec:
    """The example agent, exec'd by a shell that first leaves two side effects pending: a
    plain background child and one in a session of its own (out of the agent's group). Each
    waits for its go-ahead, a writer on the FIFO ``WORK/go`` (``release_leftovers``), then
    appends to ``WORK/side-effect.txt``. Not a delay: a start, a turn and a kill take longer
    than any fixed delay on a loaded machine (a niced agent starts 10x slower there)."""
    effect = work / "side-effect.txt"
    go = work / "go"
    if not go.exists():
        os.mkfifo(go)
    agent = shlex.join(
        [sys.executable, "-m", "protocol.example_agent", "--state-file", str(work / "st.json")]
    )
    later = f"cat {shlex.quote(str(go))} > /dev/null; echo ran >> {shlex.quote(str(effect))}"
    script = f"sh -c {shlex.quote(later)} & setsid sh -c {shlex.quote(later)} & exec {agent}"
    return AgentSpec("tree-agent", ("sh", "-c", script))


def release_leftovers(work: Path) -> bool:
    """Give every child of ``tree_agent`` still waiting its go-ahead (they then write the
    side effect); False when none is left to take it (nothing can ever write it)."""
    try:
        fd = os.open(work / "go", os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO with no reader: no leftover is waiting
            return False
        raise
    os.close(fd)
    return True


def _agent_has_prompt(cp: ControlPlane, session_id: str, command_id: str) -> bool:
    if cp.command(command_id).state is not CommandState.RUNNING:
        return False
    return any(
        e.kind == "session_update" and e.command_id == command_id for e in cp.events(session_id)
    )


def main(argv: list[str]) -> int:
    work = Path(argv[0]).resolve()
    db = argv[1] if len(argv) > 1 else None  # the test's store (either backend)
    with open_cp(work, db=db) as cp:
        spawned = cp.spawn(tree_agent(work), work, "#hang", idempotency_key="tree")
        assert spawned.command is not None
        deadline = time.monotonic() + 60
        # Running and the agent's first update stored: the agent has the prompt, so the
        # restart continues the turn rather than sending "#hang" again (which would hang).
        while not _agent_has_prompt(cp, spawned.session.id, spawned.command.id):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        print(f"running {spawned.session.id}", flush=True)
        time.sleep(3600)  # the test kills us
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
