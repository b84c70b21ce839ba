"""An agent's whole process tree dies with the control plane (kill -9 included), with the
agent, and when the control plane stops it; nothing it started finishes its side effect."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from control_plane import CommandState
from protocol.agent.proc_tree import MARKER_ENV
from store import AgentSpec, Store
from tests.conftest import live_pids
from tests.support.cp_harness import open_cp
from tests.support.tree_driver import release_leftovers, tree_agent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
# How long a released leftover gets to write its side effect before the test looks.
SIDE_EFFECT_S = 0.5


def _tree_pids(marker: bytes) -> list[int]:
    """Live processes carrying the reaper marker of one agent tree."""
    return live_pids("environ", marker + b"\0")


def _assert_no_side_effect(work: Path) -> None:
    """No child of the tree is left to write its side effect: none takes the go-ahead (and
    if one did, the file it writes says so)."""
    released = release_leftovers(work)
    time.sleep(SIDE_EFFECT_S if released else 0)
    assert not (work / "side-effect.txt").exists(), "a leftover finished its side effect"
    assert not released, "a child of the agent's tree outlived it, waiting for its go-ahead"


def _marker_of(db: str, session_id: str) -> bytes:
    with Store.open(db) as store:
        tree = store.get_session(session_id).agent_process
    assert tree is not None, "the agent's tree is recorded with the session"
    return f"{MARKER_ENV}={tree['reaperPid']}.{tree['reaperStart']}".encode()


@pytest.mark.timeout(60)
def test_a_live_leftover_takes_its_go_ahead_and_writes_the_side_effect(tmp_path: Path) -> None:
    """The check the tests below rely on can fail: with the tree's children alive (the tree
    run by hand, no control plane to kill it), both take the go-ahead and write."""
    spec = tree_agent(tmp_path)
    tree = subprocess.Popen(spec.command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not release_leftovers(tmp_path):  # until the children wait on the FIFO
            assert time.monotonic() < deadline, "the tree's children never waited"
            time.sleep(0.02)
        effect = tmp_path / "side-effect.txt"

        def written() -> int:
            return effect.read_text().count("ran") if effect.exists() else 0

        while written() < 2:
            assert time.monotonic() < deadline, "a released child wrote nothing"
            release_leftovers(tmp_path)  # a child that was not waiting yet the first time
            time.sleep(0.02)
        assert not release_leftovers(tmp_path)  # both went their way: none is waiting
    finally:
        tree.kill()
        tree.wait(10)


@pytest.mark.timeout(120)
def test_kill_9_of_the_control_plane_kills_the_agent_tree_before_its_side_effects(
    tmp_path: Path,
    db: str,
) -> None:
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.support.tree_driver", str(tmp_path), db],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert driver.stdout is not None
        line = driver.stdout.readline().split()
        assert line and line[0] == "running", line
        session_id = line[1]
        marker = _marker_of(db, session_id)
        assert len(_tree_pids(marker)) >= 4  # the agent, two shells and their waiting cats
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        killed_at = time.monotonic()
        while _tree_pids(marker) and time.monotonic() - killed_at < 1.0:
            time.sleep(0.01)
        assert _tree_pids(marker) == [], "the agent's tree outlived the control plane by 1 s"
    finally:
        if driver.poll() is None:
            driver.kill()
    _assert_no_side_effect(tmp_path)

    # A restart restores the session; the next prompt runs.
    with open_cp(tmp_path, db=db) as cp:
        follow = cp.prompt(session_id, "after the crash", idempotency_key="next")
        assert cp.wait(follow.id, 60).state is CommandState.COMPLETED
        hung = [c for c in cp.commands(session_id) if c.id != follow.id]
        # The agent resumed with the prompt in its conversation: continued, not resent.
        assert [c.state for c in hung] == [CommandState.COMPLETED]
        prompts = [e for e in cp.events(session_id) if e.kind == "prompt"]
        assert [bool(e.payload.get("continuation")) for e in prompts] == [False, True, False]
    _assert_no_side_effect(tmp_path)  # the continued turn did not run the tree's commands


@pytest.mark.timeout(120)
def test_closing_a_session_kills_its_agent_tree(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        spawned = cp.spawn(tree_agent(tmp_path), tmp_path, "hello")
        assert spawned.command is not None
        assert cp.wait(spawned.command.id, 60).state is CommandState.COMPLETED
        tree = cp.get(spawned.session.id).agent_process
        assert tree is not None
        marker = f"{MARKER_ENV}={tree['reaperPid']}.{tree['reaperStart']}".encode()
        assert _tree_pids(marker)
        cp.close_session(spawned.session.id)
        deadline = time.monotonic() + 10
        while _tree_pids(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _tree_pids(marker) == []
    _assert_no_side_effect(tmp_path)


@pytest.mark.timeout(120)
def test_a_leftover_tree_whose_reaper_was_sigkilled_is_killed_before_the_session_restarts(
    tmp_path: Path,
    db: str,
) -> None:
    """The reaper cannot clean up after its own SIGKILL (the OOM killer, kill -9 of a whole
    process group): the next launch of the session kills what the record names."""
    with open_cp(tmp_path, db=db) as cp:
        spawned = cp.spawn(tree_agent(tmp_path), tmp_path, "hello")
        assert spawned.command is not None
        cp.wait(spawned.command.id, 60)
        tree = cp.get(spawned.session.id).agent_process
        assert tree is not None
        marker = f"{MARKER_ENV}={tree['reaperPid']}.{tree['reaperStart']}".encode()
        os.kill(int(tree["reaperPid"]), signal.SIGKILL)
        time.sleep(0.3)
        assert _tree_pids(marker), "the setsid child outlives a SIGKILLed reaper"
        again = cp.prompt(spawned.session.id, "again")
        assert cp.wait(again.id, 60).state is CommandState.COMPLETED
        started = [e for e in cp.events(spawned.session.id) if e.kind == "agent_started"]
        assert started[-1].payload.get("leftoversKilled", 0) >= 1
        assert _tree_pids(marker) == []


@pytest.mark.timeout(120)
def test_an_agent_that_exits_mid_turn_ends_the_turn_although_a_child_holds_its_stdout(
    tmp_path: Path,
    db: str,
) -> None:
    """The child inherited the agent's stdout: before the reaper, the pipe stayed open and
    the turn hung until its timeout. The reaper kills what the agent leaves when it exits."""
    import shlex

    agent = shlex.join([sys.executable, "-m", "protocol.example_agent"])
    spec = AgentSpec("leaky", ("sh", "-c", f"sleep 300 & exec {agent}"))
    with open_cp(tmp_path, db=db, turn_timeout_s=90) as cp:
        spawned = cp.spawn(spec, tmp_path, "#crash")
        assert spawned.command is not None
        started = time.monotonic()
        outcome = cp.wait(spawned.command.id, 60)
        assert outcome.state is CommandState.FAILED
        assert time.monotonic() - started < 30  # not the 90 s turn timeout
