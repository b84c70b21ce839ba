"""A driver process for the crash-loop test: killed with SIGKILL at random moments and
restarted, it must still bring every command to a final state exactly once.

    python -m tests.support.crash_loop_driver DB WORKDIR N_SESSIONS PROMPTS_PER_SESSION

DB is a SQLite file or a PostgreSQL URL.

Opens a ControlPlane on DB (the example agent as real subprocesses, at most 4 turns at a
time), spawns N sessions (spawn keys ``s{i}``: a restarted driver gets the same sessions
back), each with a JSONL sink ``WORKDIR/sinks/<i>.jsonl`` and a first prompt, queues the
follow-ups (keys ``s{i}-p{j}``), waits for every command to be final and for delivery to
catch up, then prints ``all-done`` and exits 0. Everything it does is idempotent.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from control_plane import ControlPlane
from tests.support.cp_harness import FAST, example_agent

MAX_RUNNING_TURNS = 4
WAIT_S = 600.0


def prompt_text(i: int, j: int) -> str:
    """The prompt of session ``i``'s ``j``-th command (``j == 0``: the spawn's first prompt).
    Unique per command, so the agent's invocation log can be matched to commands."""
    return f"#chunks=5 #delay=20 s{i}-p{j}"


def open_cp(db: Path | str, workdir: Path) -> ControlPlane:
    """Like ``tests.support.cp_harness.open_cp`` but on an explicit store path."""
    settings = replace(FAST, log_dir=str(workdir / "logs"), max_running_turns=MAX_RUNNING_TURNS)
    return ControlPlane.open(db, settings=settings)


def main(argv: list[str]) -> int:
    # A SQLite file, or a PostgreSQL URL (the fleet crash loop: three drivers, one database).
    db = argv[0] if "://" in argv[0] else Path(argv[0]).resolve()
    workdir = Path(argv[1]).resolve()
    n_sessions, per_session = int(argv[2]), int(argv[3])
    agent = example_agent(workdir)
    with open_cp(db, workdir) as cp:
        report = cp.recovery
        print(
            f"opened pid={os.getpid()} requeued={len(report.requeued)} "
            f"failed={len(report.failed)} to_error={len(report.sessions_to_error)}",
            flush=True,
        )
        sessions = [
            cp.spawn(
                agent,
                workdir,
                prompt_text(i, 0),
                jsonl_sink=workdir / "sinks" / f"{i}.jsonl",
                idempotency_key=f"s{i}",
            )
            for i in range(n_sessions)
        ]

        def follow_ups(i: int) -> list[str]:
            # In order within a session; sessions in parallel (their writes share commits).
            sid = sessions[i].session.id
            return [
                cp.prompt(sid, prompt_text(i, j), idempotency_key=f"s{i}-p{j}").id
                for j in range(1, per_session)
            ]

        with ThreadPoolExecutor(max_workers=n_sessions) as pool:
            queued = list(pool.map(follow_ups, range(n_sessions)))
        command_ids = [s.command.id for s in sessions if s.command is not None]
        command_ids += [c for ids in queued for c in ids]
        print(f"enqueued {len(command_ids)}", flush=True)
        for command_id in command_ids:
            cp.wait(command_id, WAIT_S)
        if not cp.wait_delivered(timeout=60):
            print("delivery did not catch up", flush=True)
            return 3
    print("all-done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
