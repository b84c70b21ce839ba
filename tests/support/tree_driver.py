"""A control-plane process for the agent-tree tests: spawns a session whose agent starts
children (one in a new session, as ``setsid`` would) that write a file after a delay, runs a
turn that hangs, reports, then waits to be killed.

    python -m tests.support.tree_driver WORK DELAY_S
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

from control_plane import CommandState
from store import AgentSpec
from tests.support.cp_harness import open_cp


def tree_agent(work: Path, delay_s: float) -> AgentSpec:
    """The example agent, exec'd by a shell that first leaves two side effects pending: a
    plain background child and one in a session of its own (out of the agent's group)."""
    effect = work / "side-effect.txt"
    agent = shlex.join(
        [sys.executable, "-m", "protocol.example_agent", "--state-file", str(work / "st.json")]
    )
    later = f"sleep {delay_s}; echo ran >> {shlex.quote(str(effect))}"
    script = f"sh -c {shlex.quote(later)} & setsid sh -c {shlex.quote(later)} & exec {agent}"
    return AgentSpec("tree-agent", ("sh", "-c", script))


def main(argv: list[str]) -> int:
    work, delay_s = Path(argv[0]).resolve(), float(argv[1])
    db = argv[2] if len(argv) > 2 else None  # the test's store (either backend)
    with open_cp(work, db=db) as cp:
        spawned = cp.spawn(tree_agent(work, delay_s), work, "#hang", idempotency_key="tree")
        assert spawned.command is not None
        deadline = time.monotonic() + 60
        while cp.command(spawned.command.id).state is not CommandState.RUNNING:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        print(f"running {spawned.session.id}", flush=True)
        time.sleep(3600)  # the test kills us
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
