"""The fault loop's work: the live process as a client (prompts it sends, retried while the
store refuses them) and the crash loop's driver started again and again, each life killed at a
drawn moment (tests/crash/test_fault_loop.py).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

from control_plane import (
    ControlPlane,
    SessionState,
    StoreUnavailable,
)
from tests.conftest import pid_alive
from tests.crash.test_crash_loop import (
    KILL_MODES,
    Figures,
    _log,
    _recovery_counts,
    _start_driver,
)
from tests.support.crash_loop_driver import prompt_text
from tests.support.fault_injection import FaultInjector

T = TypeVar("T")

N_SESSIONS = 4
STEP = 5  # new prompts per session in each driver life
# The sessions the live client prompts: mostly owned by the live process. The others get
# work only from driver lives: idle, hence passivated, in between, so a new driver life
# usually takes them and its kill cuts their turns short.
CLIENT_SESSIONS = (0, 1)
DRIVER_KEYS = {f"s{i}" for i in range(N_SESSIONS) if i not in CLIENT_SESSIONS}


@dataclass
class Work:
    """The prompts handed out so far: ``per_session`` of them (j = 0 .. per_session - 1) for
    every session, whoever queues them (the live client, a driver life, the final round)."""

    per_session: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock)
    acknowledged: dict[tuple[int, int], str] = field(default_factory=dict)  # (i, j) -> id
    refused: Counter[str] = field(default_factory=Counter)

    def reserve(self, n: int) -> int:
        with self.lock:
            self.per_session += n
            return self.per_session


def _until_taken(call: Callable[[], T], refused: Counter[str], what: str) -> T:
    """A host call the store may refuse for now: the same call again (same key) until taken."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return call()
        except StoreUnavailable:
            refused[what] += 1
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def live_client(
    cp: ControlPlane, sids: list[str], work: Work, seed: int, stop: threading.Event
) -> None:
    """Now and then a new prompt for one or both of the sessions the live process keeps
    busy (``CLIENT_SESSIONS``); every other prompt handed out meanwhile is queued by the
    next driver life, or the final round."""
    rng = random.Random(seed)
    while not stop.wait(rng.uniform(0.8, 2.5)):
        j = work.reserve(1) - 1
        for i in sorted(rng.sample(CLIENT_SESSIONS, rng.randint(1, len(CLIENT_SESSIONS)))):
            command = _until_taken(
                partial(cp.prompt, sids[i], prompt_text(i, j), idempotency_key=f"s{i}-p{j}"),
                work.refused,
                "prompt",
            )
            work.acknowledged[(i, j)] = command.id


# -- driver lives ------------------------------------------------------------------------------


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = defaultdict(list)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        children[int(stat[stat.rfind(b")") + 2 :].split()[1])].append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children[todo.pop()]:
            found.append(child)
            todo.append(child)
    return found


def _owned_by(cp: ControlPlane, pid: int) -> tuple[int, int]:
    """(sessions the process owns, those of them running a turn)."""
    owned = [
        s for s in cp.list_sessions(limit=100) if s.owner and s.owner.split(":")[1] == str(pid)
    ]
    return len(owned), sum(s.state is SessionState.RUNNING for s in owned)


@dataclass
class Lives:
    lives: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    kills_in_fault: Counter[str] = field(default_factory=Counter)
    kills_owning: int = 0  # kills while the driver owned sessions
    kills_mid_turn: int = 0  # ... with a turn running
    turns_not_reached: int = 0  # "turns" kills where the driver never got a session
    refused_at_start: int = 0  # lives that ended at once: the store refused their spawn
    finished: int = 0  # lives that finished all their work before the kill
    last_refused: bool = False


def _wait_until(
    predicate: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def one_life(
    cp: ControlPlane,
    work_dir: Path,
    work: Work,
    rng: random.Random,
    lives: Lives,
    faults: FaultInjector,
    figures: Figures,
) -> None:
    """One driver life with more work, killed at a moment drawn as the crash loop draws it
    (``KILL_MODES``), and in half the lives held back further until a fault is on, so the
    kill lands while its writes are refused and retried."""
    if lives.last_refused:
        # The last life was refused at once: this one starts once the disk has room again
        # (or after 4 s), so that a long full window does not use up every life.
        deadline = time.monotonic() + 4.0
        while "disk" in faults.active and time.monotonic() < deadline:
            time.sleep(0.05)
    life = lives.lives
    lives.lives += 1
    lives.last_refused = False
    per_session = work.reserve(STEP)
    (mode,) = rng.choices(KILL_MODES, weights=(0.2, 0.3, 0.5))
    delay = {"open": rng.uniform(0.3, 2.5), "startup": rng.uniform(0.1, 1.5)}.get(
        mode, rng.uniform(0.05, 1.0)
    )
    in_fault = rng.random() < 0.5
    # Give the live process a moment to let the driver's sessions go (passivation), so this
    # life takes them over and has turns to cut short.
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and any(
        s.owner is not None for s in cp.list_sessions(limit=100) if s.spawn_key in DRIVER_KEYS
    ):
        time.sleep(0.05)
    proc = _start_driver(work_dir, life, N_SESSIONS, per_session)
    try:
        if mode == "startup":
            _wait_until(lambda: "enqueued" in _log(work_dir, life), proc, 30)
        elif mode == "turns" and not _wait_until(lambda: _owned_by(cp, proc.pid)[1] > 0, proc, 6):
            lives.turns_not_reached += proc.poll() is None
        if in_fault:
            _wait_until(lambda: bool(faults.active), proc, 6)
            delay = min(delay, 0.3)
        try:
            proc.wait(delay)
        except subprocess.TimeoutExpired:
            tree = _descendants(proc.pid)
            owned, running = _owned_by(cp, proc.pid)
            active = set(faults.active)
            proc.send_signal(signal.SIGKILL)
            # Counted only if the signal killed it: a life can finish between the wait's
            # timeout and the signal (it is then checked as a finished life, below).
            if proc.wait(30) == -signal.SIGKILL:
                lives.kills[mode] += 1
                lives.kills_owning += owned > 0
                lives.kills_mid_turn += running > 0
                for kind in active or {"none"}:
                    lives.kills_in_fault[kind] += 1
            # Its agents (and their reapers, MCP servers) die with it: none may run on.
            deadline = time.monotonic() + 5
            while (left := [p for p in tree if pid_alive(p)]) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not left, f"life {life}: processes outlived the killed driver: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    text = _log(work_dir, life)
    _recovery_counts(text, figures)
    if proc.returncode == -signal.SIGKILL:
        return
    if proc.returncode == 0 and "all-done" in text:
        lives.finished += 1
    else:  # refused while spawning or recovering: the documented typed error, nothing else
        assert proc.returncode == 1 and "StoreUnavailable" in text, text[-3000:]
        lives.refused_at_start += 1
        lives.last_refused = True
