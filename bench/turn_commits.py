"""How many commits a turn takes, and whether its outcome commits with its last updates,
for the example agent and the real ones.

What is counted
---------------
Each agent runs ``--turns`` prompts (after one warm-up turn) in one session of an in-process
control plane on a fresh SQLite store. A watch of the session, taken on the store's writer
thread at every wake-up, sees the session's commits one by one. Per turn it counts the
commits that hold an event of the turn's command (the ``prompt`` event, the updates, the
``turn_ended``) and whether the commit holding ``turn_ended`` also holds a
``session_update``: the turn's last updates and its outcome in one transaction, not two in
a row (``actors/session/recorder.py``: the answer wait). Counted, not timed: the figures
do not depend on the machine's noise, only on how the agent spaces its writes.

The real agents (Claude Code, Codex, Gemini CLI) run against the stand-in model server of
``tests/real_agents`` (needs Node and ``npm ci --prefix tests/real_agents``; an agent that
is not installed is reported as skipped). The example agent runs ``#chunks=N`` turns.

Run from the repository root::

    python bench/turn_commits.py                      # every agent, 10 turns each
    python bench/turn_commits.py --agents example --chunks 100 --turns 20
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if sys.path[0] != _REPO_ROOT:  # ahead of bench/ itself, whose actors.py is not the package
    sys.path.insert(0, _REPO_ROOT)

from actors.agent_profiles import AgentProfile, AgentProfiles  # noqa: E402
from actors.settings import RuntimeSettings  # noqa: E402
from bench._common import machine_info, median, positive_int  # noqa: E402
from control_plane import CommandState, ControlPlane  # noqa: E402
from protocol.agent.permissions import Decision, PermissionPolicy  # noqa: E402
from state_machines.event_kinds import EventKind  # noqa: E402
from store import AgentSpec, SessionCommit  # noqa: E402

AGENTS = ("example", "claude", "codex", "gemini")
TURN_TIMEOUT_S = 120.0


@dataclass
class Counted:
    agent: str
    commits: list[int]  # per turn: commits holding one of its command's events
    joined: int  # turns whose turn_ended committed with a session_update

    def line(self) -> str:
        turns = len(self.commits)
        return (
            f"{self.agent:8s} {turns:5d}  {median([float(c) for c in self.commits]):7.1f}"
            f"  {min(self.commits):3d}..{max(self.commits):<3d}  {self.joined:3d} of {turns}"
        )


class CommitLog:
    """The session's commits, one share each: the watch is taken on the writer thread at
    every wake-up, so no two commits are merged into one share."""

    def __init__(self) -> None:
        self.shares: list[SessionCommit] = []
        self._lock = threading.Lock()
        self.take: Callable[[], SessionCommit] | None = None

    def wake(self) -> None:
        assert self.take is not None
        share = self.take()
        with self._lock:
            self.shares.append(share)

    def drain_turn(self, command_id: str, timeout_s: float = 10.0) -> list[SessionCommit]:
        """The shares so far, once the one with ``command_id``'s ``turn_ended`` is among
        them (a waiter can hear of the commit a moment before this watch does)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                ended = any(
                    e.kind == EventKind.TURN_ENDED and e.command_id == command_id
                    for s in self.shares
                    for e in s.events
                )
                if ended or time.monotonic() > deadline:
                    shares, self.shares = self.shares, []
                    return shares
            time.sleep(0.01)


def _count_turn(shares: list[SessionCommit], command_id: str) -> tuple[int, bool]:
    mine = [s for s in shares if any(e.command_id == command_id for e in s.events)]
    ended = [s for s in mine if any(e.kind == EventKind.TURN_ENDED for e in s.events)]
    joined = bool(ended) and any(e.kind == EventKind.SESSION_UPDATE for e in ended[0].events)
    return len(mine), joined


def run_agent(
    cp: ControlPlane, spec: AgentSpec, cwd: str, prompt: Callable[[int], str], turns: int
) -> tuple[list[int], int]:
    spawned = cp.spawn(spec, cwd, prompt(-1))
    assert spawned.command is not None
    if cp.wait(spawned.command.id, TURN_TIMEOUT_S).state is not CommandState.COMPLETED:
        raise RuntimeError(f"{spec.name}: the warm-up turn did not complete")
    session_id = spawned.session.id
    log = CommitLog()
    watch = cp.watch_session(session_id, log.wake)
    log.take = watch.take
    commits: list[int] = []
    joined = 0
    try:
        for i in range(turns):
            command = cp.prompt(session_id, prompt(i))
            if cp.wait(command.id, TURN_TIMEOUT_S).state is not CommandState.COMPLETED:
                raise RuntimeError(f"{spec.name}: turn {i} did not complete")
            count, together = _count_turn(log.drain_turn(command.id), command.id)
            commits.append(count)
            joined += together
    finally:
        watch.close()
    return commits, joined


def measure(agent: str, turns: int, chunks: int, workdir: Path) -> Counted | str:
    """The agent's counts, or why it was skipped."""
    root = workdir / agent
    cwd = root / "work"
    cwd.mkdir(parents=True)
    with ExitStack() as stack:
        profiles: dict[str, AgentProfile] = {}
        if agent == "example":
            spec = AgentSpec(
                "example-agent",
                (sys.executable, "-m", "protocol.example_agent", "--state-file", str(root / "s")),
            )

            def prompt(i: int) -> str:
                return f"#chunks={chunks} turn {i}"
        else:
            from tests.real_agents.agents import launch, skip_reason
            from tests.real_agents.model_server import ModelServer

            reason = skip_reason(agent)
            if reason:
                return reason
            server = stack.enter_context(ModelServer())
            home = root / "home"
            home.mkdir()
            agent_launch = launch(agent, server.base_url, home)
            profiles[agent] = AgentProfile(env=dict(agent_launch.env), fs=agent != "gemini")
            spec = AgentSpec(agent, tuple(agent_launch.argv), env=tuple(agent_launch.env.items()))

            def prompt(i: int) -> str:
                return f"SAY reply number {i} in a few words"

        settings = RuntimeSettings(
            permission_policy=PermissionPolicy(Decision.ALLOW),
            turn_timeout_s=TURN_TIMEOUT_S,
            agent_profiles=AgentProfiles(profiles),
            log_dir=str(root / "logs"),
        )
        cp = stack.enter_context(
            ControlPlane.open(root / "cp.db", settings=settings, subagent_tools=False)
        )
        commits, joined = run_agent(cp, spec, str(cwd), prompt, turns)
        return Counted(agent, commits, joined)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Commits per turn and outcomes committed with their last updates, per agent."
    )
    parser.add_argument("--turns", type=positive_int, default=10, help="turns per agent (10)")
    parser.add_argument(
        "--agents",
        default=",".join(AGENTS),
        help=f"comma-separated, of {', '.join(AGENTS)} (default: all)",
    )
    parser.add_argument(
        "--chunks", type=positive_int, default=100, help="the example agent's updates per turn"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    unknown = [a for a in agents if a not in AGENTS]
    if unknown:
        print(f"--agents: unknown {', '.join(unknown)} (known: {', '.join(AGENTS)})")
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="acp-turn-commits-"))
    results: list[Counted | tuple[str, str]] = []
    try:
        for agent in agents:
            counted = measure(agent, args.turns, args.chunks, workdir)
            results.append(counted if isinstance(counted, Counted) else (agent, counted))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    info: dict[str, Any] = machine_info()
    print(
        f"commits per turn, {args.turns} turns per agent (+1 warm-up); Python {info['python']}, "
        f"SQLite {info['sqlite']}"
    )
    print("agent    turns  median  min..max  outcome with its last updates")
    for result in results:
        if isinstance(result, Counted):
            print(result.line())
        else:
            print(f"{result[0]:8s} skipped: {result[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
