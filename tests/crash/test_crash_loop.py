"""The crash loop: a control plane driver killed with SIGKILL at random moments, restarted,
many times, then left to finish. Whatever the moment of each kill, at the end:

- every command is final: completed, or failed only because interruptions used up its
  attempt budget;
- nothing completed ran again: the agent saw each prompt at most once per attempt, and the
  last time it saw a completed prompt was in the turn that completed it;
- every session's event log is contiguous (seq 1..last_event_seq) and no session is stuck
  running or cancelling;
- every JSONL sink holds its session's events exactly once, in seq order;
- every session exports to a valid JSONL v3 transcript;
- no agent process outlived the driver that started it (checked after every kill).

The seed is printed (``CRASH_LOOP_SEED=<n>`` reruns a failure's exact kill schedule).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from control_plane import ControlPlane
from protocol.transcript.reader import validate_v3
from state_machines.interrupted_turns import DEFAULT_CONTINUATION
from tests.conftest import live_pids
from tests.support.crash_loop_driver import prompt_text
from tests.support.direct_sql import rows

BUDGET_ERROR = re.compile(r"^interrupted (\d+) times; attempt budget of (\d+) exhausted$")
# Where in a driver's life the kill lands, counted from: the process start (imports, open,
# recovery, spawns), the driver having queued everything (agents starting), or the first
# prompt the agents received in this life (turns running).
KILL_MODES = ("open", "startup", "turns")


@dataclass
class Figures:
    seed: int
    kills: int = 0
    kills_by_mode: Counter[str] = field(default_factory=Counter)
    lives: int = 0
    per_session: int = 0  # prompts per session, after any top-ups
    top_ups: int = 0
    commands: int = 0
    completed: int = 0
    failed_budget: int = 0
    # Cut short by a kill, then not sent again: the restarted agent resumed with it.
    interrupted_not_resent: int = 0
    # Cut short by a kill, the agent resumed with it: its last turn the continuation prompt.
    continued: int = 0
    max_attempts_seen: int = 0
    retried_commands: int = 0
    invocations: int = 0
    requeued: int = 0
    recovered_failed: int = 0
    sessions_to_error: int = 0
    runtime_s: float = 0.0
    life_s: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def show(self) -> str:
        modes = ", ".join(f"{m}={self.kills_by_mode[m]}" for m in KILL_MODES)
        lives = ", ".join(f"{m}={sum(v) / len(v):.1f}s" for m, v in self.life_s.items() if v)
        return (
            f"crash-loop figures: seed={self.seed} kills={self.kills} ({modes}) "
            f"driver lives={self.lives} (work topped up {self.top_ups} times) "
            f"commands={self.commands} completed={self.completed} "
            f"failed(budget)={self.failed_budget} "
            f"interrupted(not resent)={self.interrupted_not_resent} "
            f"continued={self.continued} "
            f"max attempts seen={self.max_attempts_seen} "
            f"commands run more than once={self.retried_commands} "
            f"agent invocations={self.invocations} recovery: requeued={self.requeued} "
            f"failed={self.recovered_failed} sessions to error={self.sessions_to_error} "
            f"runtime={self.runtime_s:.1f}s; mean driver life by kill mode: {lives}"
        )


def _seed() -> int:
    env = os.environ.get("CRASH_LOOP_SEED")
    return int(env) if env else random.SystemRandom().randrange(2**32)


def _start_driver(
    work: Path, life: int, n_sessions: int, per_session: int, db: str | None = None
) -> subprocess.Popen[bytes]:
    log = open(work / f"driver-{life}.log", "wb")  # noqa: SIM115 - the child holds it
    try:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.crash_loop_driver",
                db or str(work / "cp.db"),
                str(work),
                str(n_sessions),
                str(per_session),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    finally:
        log.close()


def _lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for _ in fh)
    except FileNotFoundError:
        return 0


def _log(work: Path, life: int) -> str:
    return (work / f"driver-{life}.log").read_text(errors="replace")


def _wait_for(predicate, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """True once ``predicate()`` holds; False if the driver exited first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    raise AssertionError(f"driver made no progress in {timeout}s")


def _agent_pids(work: Path) -> list[int]:
    """Live example-agent processes started for this work dir (zombies excluded)."""
    return live_pids("cmdline", str(work / "invocations.jsonl").encode())


def _no_agents_left(work: Path, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (pids := _agent_pids(work)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pids


def _recovery_counts(text: str, figures: Figures) -> None:
    for match in re.finditer(
        r"^opened pid=\d+ requeued=(\d+) failed=(\d+) to_error=(\d+)$", text, re.M
    ):
        figures.requeued += int(match.group(1))
        figures.recovered_failed += int(match.group(2))
        figures.sessions_to_error += int(match.group(3))


def run_crash_loop(
    work: Path,
    seed: int,
    kills: int,
    n_sessions: int,
    per_session: int,
    mode_weights: tuple[float, float, float] = (0.3, 0.3, 0.4),
) -> Figures:
    """Kill the driver ``kills`` times, then let it finish. Should the work run out before
    the kills do, the next life asks for more prompts per session (new keys; the earlier
    ones stay idempotent), as a client adding work would."""
    rng = random.Random(seed)
    figures = Figures(seed, per_session=per_session)
    started = time.monotonic()
    invocations = work / "invocations.jsonl"
    while figures.kills < kills:
        life = figures.lives
        figures.lives += 1
        seen = _lines(invocations)
        (mode,) = rng.choices(KILL_MODES, weights=mode_weights)
        delay = rng.uniform(0.3, 2.5)
        born = time.monotonic()
        proc = _start_driver(work, life, n_sessions, figures.per_session)
        try:
            if mode == "startup":
                ready = _wait_for(lambda life=life: "enqueued" in _log(work, life), proc, 90)
            elif mode == "turns":
                ready = _wait_for(lambda seen=seen: _lines(invocations) > seen, proc, 90)
            else:
                ready = True
            if ready:
                try:
                    proc.wait(delay)
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGKILL)
            code = proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        figures.life_s[mode].append(time.monotonic() - born)
        text = _log(work, life)
        _recovery_counts(text, figures)
        if code != -signal.SIGKILL:
            # It finished before the kill: nothing left to interrupt, so add work.
            assert code == 0 and "all-done" in text, text
            figures.per_session += max(10, figures.per_session // 2)
            figures.top_ups += 1
            continue
        figures.kills += 1
        figures.kills_by_mode[mode] += 1
        # The kernel kills a dead driver's agents (parent-death signal): none may linger
        # into the next life, where a second agent could run the same session.
        leftover = _no_agents_left(work, timeout=5.0)
        assert not leftover, f"agents outlived the killed driver: {leftover}"
    life = figures.lives
    figures.lives += 1
    born = time.monotonic()
    proc = _start_driver(work, life, n_sessions, figures.per_session)
    try:
        code = proc.wait(600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    figures.life_s["final"].append(time.monotonic() - born)
    text = _log(work, life)
    _recovery_counts(text, figures)
    assert code == 0 and "all-done" in text, text
    figures.runtime_s = time.monotonic() - started
    return figures


def check_invariants(work: Path, n_sessions: int, figures: Figures, db: str | None = None) -> None:
    """The invariants of the module docstring, on ``db`` (default: the SQLite file in
    ``work``; the fleet loop passes its PostgreSQL database)."""
    per_session = figures.per_session
    db = db or str(work / "cp.db")
    leftover = _no_agents_left(work)
    assert not leftover, f"agent processes outlived their driver: {leftover}"

    sessions = rows(db, "SELECT id, spawn_key, state, owner, last_event_seq FROM sessions")
    commands = rows(
        db,
        "SELECT id, session_id, seq, state, attempts, max_attempts, error, payload FROM commands",
    )
    events = rows(
        db,
        "SELECT id, session_id, seq, command_id, kind, payload FROM events "
        "ORDER BY session_id, seq",
    )
    sinks = rows(
        db,
        "SELECT b.session_id, b.target, cp.last_event_seq FROM bindings b "
        "JOIN delivery_checkpoints cp ON cp.binding_id = b.id",
    )

    # The sessions and commands the driver asked for, once each.
    assert sorted(s["spawn_key"] for s in sessions) == sorted(f"s{i}" for i in range(n_sessions))
    assert len(commands) == n_sessions * per_session
    figures.commands = len(commands)

    by_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        by_session[event["session_id"]].append(event)

    # Sessions: nobody stuck mid-turn, nobody holding them after a clean close, logs contiguous.
    for s in sessions:
        assert s["state"] not in ("running", "cancelling"), dict(s)
        assert s["owner"] is None, dict(s)
        seqs = [e["seq"] for e in by_session[s["id"]]]
        assert seqs == list(range(1, s["last_event_seq"] + 1)), s["spawn_key"]

    # Commands: final; failed only for a used-up attempt budget; interrupted only when a
    # kill cut the turn short and the resumed agent already had the prompt.
    for c in commands:
        figures.max_attempts_seen = max(figures.max_attempts_seen, c["attempts"])
        figures.retried_commands += c["attempts"] > 1
        if c["state"] == "completed":
            figures.completed += 1
            assert c["attempts"] >= 1, dict(c)
        elif c["state"] == "interrupted":
            assert "not sent again" in (c["error"] or ""), dict(c)
            assert c["attempts"] >= 1, dict(c)
            figures.interrupted_not_resent += 1
        else:
            assert c["state"] == "failed", dict(c)
            match = BUDGET_ERROR.match(c["error"] or "")
            assert match, dict(c)
            assert c["attempts"] == c["max_attempts"] == int(match.group(2)), dict(c)
            figures.failed_budget += 1

    # Per command, from the log: one prompt event per attempt; every attempt but a
    # completing one ended interrupted; a completed command ended its turn exactly once.
    per_command: dict[str, Counter[str]] = defaultdict(Counter)
    for e in events:
        if e["command_id"] is not None:
            per_command[e["command_id"]][e["kind"]] += 1
    for c in commands:
        kinds = per_command[c["id"]]
        assert kinds["prompt"] == c["attempts"], (dict(c), kinds)
        assert kinds["turn_failed"] == 0, (dict(c), kinds)
        if c["state"] == "completed":
            assert kinds["turn_ended"] == 1, (dict(c), kinds)
            assert kinds["interrupted"] == c["attempts"] - 1, (dict(c), kinds)
        elif c["state"] == "interrupted":
            assert kinds["turn_ended"] == 0, (dict(c), kinds)
            assert kinds["interrupted"] == c["attempts"], (dict(c), kinds)
            assert kinds["turn_interrupted"] == 1, (dict(c), kinds)
        else:
            assert kinds["turn_ended"] == 0, (dict(c), kinds)
            assert kinds["interrupted"] == c["attempts"], (dict(c), kinds)

    # The agent's own record of what it was asked: at most once per attempt, and a
    # completed prompt was last seen by the very agent process that completed it.
    lines = [
        json.loads(line)
        for line in (work / "invocations.jsonl").read_text().splitlines()
        if line.strip()
    ]
    figures.invocations = len(lines)
    seen_by_text: dict[str, list[dict[str, object]]] = defaultdict(list)
    for line in lines:
        seen_by_text[str(line["message"])].append(line)
    text_of = {c["id"]: json.loads(c["payload"])["content"][0]["text"] for c in commands}
    expected_texts = {prompt_text(i, j) for i in range(n_sessions) for j in range(per_session)}
    assert set(text_of.values()) == expected_texts
    # Besides the prompts, the continuation prompt: a turn a kill cut off, whose agent
    # resumed with it, is continued (docs/operations.md, "Interrupted turns").
    assert set(seen_by_text) <= expected_texts | {DEFAULT_CONTINUATION}
    last_prompt: dict[str, dict[str, Any]] = {}
    for e in events:
        if e["kind"] == "prompt" and e["command_id"] is not None:
            last_prompt[e["command_id"]] = json.loads(e["payload"])
    continued_by = {line["pid"] for line in seen_by_text.get(DEFAULT_CONTINUATION, [])}
    figures.continued = sum(1 for p in last_prompt.values() if p.get("continuation"))
    completing_pid = _completing_agent_pids(by_session)
    for c in commands:
        seen = seen_by_text[text_of[c["id"]]]
        assert len(seen) <= c["attempts"], (dict(c), seen)
        if c["state"] == "completed":
            assert seen, dict(c)
            if last_prompt[c["id"]].get("continuation"):
                # Its last turn was the continuation, served by the agent that completed it.
                assert completing_pid[c["id"]] in continued_by, dict(c)
            else:
                assert seen[-1]["pid"] == completing_pid[c["id"]], (dict(c), seen)

    # Sinks: every event of the session exactly once, in seq order.
    for sink in sinks:
        expected = [e["id"] for e in by_session[sink["session_id"]]]
        delivered = [
            json.loads(line)["eventId"] for line in Path(sink["target"]).read_text().splitlines()
        ]
        assert delivered == expected, sink["target"]
        assert sink["last_event_seq"] == len(expected)
    assert len(sinks) == n_sessions

    # Export: a valid JSONL v3 transcript per session.
    (work / "exports").mkdir(exist_ok=True)
    with ControlPlane.open(db, run_sessions=False) as cp:
        for s in sessions:
            target = cp.export_jsonl(s["id"], work / "exports" / f"{s['spawn_key']}.jsonl")
            validate_v3(target)


def _completing_agent_pids(by_session: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    """For each command whose turn ended, the pid of the agent that served that turn (the
    latest ``agent_started`` before it in the session's log)."""
    out: dict[str, int] = {}
    for events in by_session.values():
        pid: int | None = None
        for e in events:
            if e["kind"] == "agent_started":
                pid = int(json.loads(e["payload"])["pid"])
            elif e["kind"] == "turn_ended":
                assert pid is not None
                out[e["command_id"]] = pid
    return out


@pytest.mark.timeout(240)
def test_crash_loop(tmp_path: Path) -> None:
    seed = _seed()
    print(f"crash-loop seed={seed} (rerun with CRASH_LOOP_SEED={seed})")
    # Sized for a 2-CPU runner: each driver life pays for the driver's and 4 agents' Python
    # start-up (the agents import the ACP SDK), so most lives are 4-8 s.
    n_sessions, per_session, kills = 4, 30, 12
    figures = run_crash_loop(tmp_path, seed, kills, n_sessions, per_session)
    check_invariants(tmp_path, n_sessions, figures)
    print(figures.show())
    assert figures.kills == kills
    assert (
        figures.completed + figures.failed_budget + figures.interrupted_not_resent
        == figures.commands
    )


@pytest.mark.slow
@pytest.mark.timeout(4 * 3600)
def test_crash_loop_hundreds_of_kills(tmp_path: Path) -> None:
    seed = _seed()
    print(f"crash-loop seed={seed} (rerun with CRASH_LOOP_SEED={seed})")
    n_sessions, per_session, kills = 6, 200, 200
    figures = run_crash_loop(
        tmp_path, seed, kills, n_sessions, per_session, mode_weights=(0.4, 0.2, 0.4)
    )
    check_invariants(tmp_path, n_sessions, figures)
    print(figures.show())
    assert figures.kills == kills
