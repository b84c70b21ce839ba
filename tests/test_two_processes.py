"""Two control-plane processes on one store never run one session at the same time.

Process A (``tests/owner_driver.py``) owns a session and is in the middle of a long turn.
This test process is B, on the same store: while A lives, B neither runs the session nor
runs a prompt B itself queued for it. After a kill -9 of A, B takes the session over (new
owner, higher fencing epoch), reruns the interrupted prompt and runs the follow-up; A's
agent died with A.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from control_plane import CommandState, SessionState
from store.ownership import owner_alive, this_owner
from tests.cp_harness import invocations, open_cp

pytestmark = pytest.mark.timeout(120)

FOLLOW_UP = "#chunks=3 #delay=20 follow-up"


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"  # a zombie is dead


def _my_agents(work: Path) -> list[int]:
    """Example-agent processes this process started for ``work`` (zombies excluded)."""
    marker, me = str(work / "invocations.jsonl").encode(), os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if marker in cmdline and int(fields[1]) == me and fields[0] != b"Z":
            found.append(int(entry))
    return found


def _wait_for(predicate, timeout: float = 30.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"{what} not reached in {timeout}s")


class _OwnerProcess:
    """Process A, with the ``key value`` lines it printed."""

    def __init__(self, work: Path, prompt: str) -> None:
        self.log = work / "owner-a.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.owner_driver", str(work), prompt],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def lines(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in self.log.read_text(errors="replace").splitlines():
            key, _, value = line.partition(" ")
            out.setdefault(key, value)
        return out

    def wait_line(self, key: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if key in (seen := self.lines()):
                return seen[key]
            assert self.proc.poll() is None, self.log.read_text()
            time.sleep(0.02)
        raise AssertionError(f"process A never printed {key!r}: {self.log.read_text()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)


def test_a_session_runs_in_one_process_at_a_time(tmp_path: Path) -> None:
    # A long turn: A's prompt is still running when A is killed, whatever the load.
    a = _OwnerProcess(tmp_path, "#chunks=60 #delay=100 a")
    try:
        a_owner = a.wait_line("owner")
        sid = a.wait_line("session")
        first_id = a.wait_line("command")
        a_agent = int(a.wait_line("agent"))
        a.wait_line("running")
        assert owner_alive(a_owner)

        with open_cp(tmp_path) as b:
            me = this_owner()
            assert me != a_owner
            before = b.get(sid)
            assert before.owner == a_owner and before.state is SessionState.RUNNING
            epoch_before = before.epoch

            # Watch B's supervisor for the whole time A is alive.
            seen_live_in_b: list[float] = []  # when B had an actor for the session
            agents_of_b: set[int] = set()  # agent processes B started meanwhile
            stop_watch = threading.Event()

            def watch() -> None:
                while not stop_watch.is_set():
                    if sid in b.supervisor.live_sessions():
                        seen_live_in_b.append(time.monotonic())
                    agents_of_b.update(_my_agents(tmp_path))
                    time.sleep(0.005)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            try:
                follow_up = b.prompt(sid, FOLLOW_UP, idempotency_key="from-b")
                deadline = time.monotonic() + 1.5  # several of B's sweeps (every 0.2 s)
                while time.monotonic() < deadline:
                    session = b.get(sid)
                    assert session.owner == a_owner, session
                    assert session.epoch == epoch_before, session
                    assert b.command(follow_up.id).state is CommandState.QUEUED
                    assert b.command(first_id).state is CommandState.RUNNING
                    time.sleep(0.05)
                assert a.proc.poll() is None, "A must still be alive here"
            finally:
                stop_watch.set()
                watcher.join()
            assert not agents_of_b, f"B started agents {agents_of_b} for A's session"
            assert not [
                e
                for e in b.events(sid)
                if e.kind.startswith("agent_") and e.payload.get("pid") != a_agent
            ]
            live_for = seen_live_in_b[-1] - seen_live_in_b[0] if seen_live_in_b else 0.0
            assert not seen_live_in_b, (
                f"B had a live actor for A's session ({len(seen_live_in_b)} samples "
                f"over {live_for:.2f}s) while A was alive"
            )
            assert [i["message"] for i in invocations(tmp_path)] == ["#chunks=60 #delay=100 a"]

            # A dies mid-turn; B takes over.
            killed_at = time.time()
            a.kill()
            _wait_for(lambda: not _pid_alive(a_agent), 10, "A's agent gone (pdeathsig)")

            first = b.wait(first_id, 60)
            assert first.state is CommandState.COMPLETED
            assert b.wait(follow_up.id, 60).state is CommandState.COMPLETED

            after = b.get(sid)
            assert after.owner == me
            assert after.epoch > epoch_before
            assert sid in b.supervisor.live_sessions()
            assert b.command(first_id).attempts == 2
            assert b.command(follow_up.id).attempts == 1

            events = b.events(sid)
            interrupted = [e for e in events if e.kind == "interrupted"]
            assert [e.payload["commandId"] for e in interrupted] == [first_id]
            assert interrupted[0].payload["willRetry"] is True
            prompts = [e for e in events if e.kind == "prompt"]
            assert [e.command_id for e in prompts] == [first_id, first_id, follow_up.id]
            # B began its runs only after A was dead: never two runs at once.
            assert prompts[1].created_at.timestamp() >= killed_at
            starts = [e for e in events if e.kind == "agent_started"]
            assert len(starts) == 2 and starts[0].payload["pid"] == a_agent
            b_agent = starts[1].payload["pid"]
            assert b_agent != a_agent and _pid_alive(b_agent)

            # What the agents themselves saw: A's agent ran the prompt once and was killed;
            # B's agent reran it, then the follow-up. A never ran the follow-up.
            seen = [(i["message"], i["pid"]) for i in invocations(tmp_path)]
            assert seen == [
                ("#chunks=60 #delay=100 a", a_agent),
                ("#chunks=60 #delay=100 a", b_agent),
                (FOLLOW_UP, b_agent),
            ]
        _wait_for(lambda: not _pid_alive(b_agent), 10, "B's agent stopped by B's close")
    finally:
        a.kill()
