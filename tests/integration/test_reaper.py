"""The process-tree reaper (protocol/agent/reaper.py) with real processes and real signals.

The tree (tests/support/tree_agent.py): the agent, a child, a middle child with a grandchild in
a new session, and a double-forked daemon; each writes its pid to a pid file and, after a delay,
appends to a side-effect file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.agent.proc_tree import (
    MARKER_ENV,
    agent_pgid_of,
    kill_leftover_tree,
    process_start_time,
)
from protocol.agent.reaper import reaper_argv
from tests.conftest import ROOT, pid_alive

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

TREE_AGENT = str(ROOT / "tests" / "support" / "tree_agent.py")
TREE_SIZE = 5  # agent, child, middle, grandchild (setsid), daemon (double fork)
DELAY = 1.5  # seconds before each tree process writes its side effect


class Tree:
    def __init__(self, tmp: Path) -> None:
        self.pidfile = tmp / "pids"
        self.sidefile = tmp / "side"

    def command(self, mode: str = "echo") -> tuple[str, ...]:
        return (sys.executable, TREE_AGENT, str(self.pidfile), str(self.sidefile), str(DELAY), mode)

    def pids(self, timeout: float = 10) -> list[int]:
        """The tree's pids (agent first), once all of them are written."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.pidfile.exists():
                pids = [int(p) for p in self.pidfile.read_text().split()]
                if len(pids) >= TREE_SIZE:
                    return pids
            time.sleep(0.002)
        raise AssertionError(f"the tree was not built in {timeout}s")

    def kill_all(self) -> None:
        if not self.pidfile.exists():
            return
        for pid in (int(p) for p in self.pidfile.read_text().split()):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if TREE_AGENT.encode() in cmdline and pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    t = Tree(tmp_path)
    try:
        yield t
    finally:
        t.kill_all()


def wait_dead(pids: list[int], timeout: float = 1.0) -> float:
    """Seconds until none of ``pids`` runs; fails with the survivors after ``timeout``."""
    start = time.monotonic()
    while True:
        alive = [p for p in pids if pid_alive(p)]
        elapsed = time.monotonic() - start
        if not alive:
            return elapsed
        assert elapsed < timeout, f"still alive after {timeout}s: {alive}"
        time.sleep(0.001)


def launch(tree: Tree, mode: str, **kwargs: object) -> subprocess.Popen[bytes]:
    argv = reaper_argv(tree.command(mode), parent_pid=os.getpid())
    return subprocess.Popen(argv, **kwargs)  # type: ignore[call-overload, no-any-return]


# A real intermediate control plane: it starts the reaper from a thread (which stays alive, or
# ends at once), prints the reaper's pid and sleeps until it is killed.
INTERMEDIATE = """
import os, subprocess, sys, threading, time
sys.path.insert(0, sys.argv[1])
from protocol.agent.reaper import reaper_argv
thread_stays = sys.argv[2] == "stays"
def run():
    argv = reaper_argv(tuple(sys.argv[3:]), parent_pid=os.getpid())
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    print(p.pid, flush=True)
    if thread_stays:
        p.wait()
threading.Thread(target=run).start()
time.sleep(120)
"""


@pytest.mark.timeout(30)
@pytest.mark.parametrize("thread", ["stays", "ends"])
def test_kill9_of_the_parent_kills_the_whole_tree_before_any_side_effect(
    tree: Tree, thread: str
) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", INTERMEDIATE, str(ROOT), thread, *tree.command("sleep")],
        stdout=subprocess.PIPE,
    )
    try:
        assert parent.stdout is not None
        reaper = int(parent.stdout.readline())
        pids = tree.pids()
        built = time.monotonic()
        if thread == "ends":
            # The spawning thread's end sends the parent-death signal too: the parent
            # process still lives, so the reaper must keep the tree running.
            time.sleep(0.2)
            assert all(pid_alive(p) for p in [reaper, *pids])
        parent.send_signal(signal.SIGKILL)
        assert parent.wait(5) == -signal.SIGKILL
        wait_dead([reaper, *pids], timeout=1.0)
    finally:
        parent.kill()
        parent.wait()
    time.sleep(max(0.0, built + DELAY + 0.3 - time.monotonic()))
    assert not tree.sidefile.exists(), tree.sidefile.read_text()


@pytest.mark.timeout(30)
def test_agent_exit_kills_its_leftovers_and_passes_the_exit_code_on(tree: Tree) -> None:
    reaper = launch(tree, "7", stdin=subprocess.DEVNULL)
    assert reaper.wait(10) == 7
    pids = tree.pids()
    # The reaper exits only once its tree is dead and reaped.
    assert [p for p in pids if pid_alive(p)] == []
    assert not tree.sidefile.exists()


@pytest.mark.timeout(30)
def test_agent_killed_by_a_signal_gives_128_plus_the_signal(tree: Tree) -> None:
    reaper = launch(tree, "sleep", stdin=subprocess.DEVNULL)
    pids = tree.pids()
    os.kill(pids[0], signal.SIGSEGV)
    assert reaper.wait(10) == 128 + signal.SIGSEGV
    assert [p for p in pids if pid_alive(p)] == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize("grace", [0.0, 5.0])
def test_sigterm_to_the_reaper_kills_the_tree(tree: Tree, grace: float) -> None:
    argv = reaper_argv(tree.command("sleep"), parent_pid=os.getpid(), term_grace=grace)
    reaper = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    pids = tree.pids()
    start = time.monotonic()
    reaper.send_signal(signal.SIGTERM)
    # With a grace, the agent gets SIGTERM first; it dies of it at once, so no waiting.
    assert reaper.wait(10) == 128 + signal.SIGTERM
    assert time.monotonic() - start < 2
    assert [p for p in pids if pid_alive(p)] == []


def _sig_ignored(pid: int, signo: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signo - 1)))
    raise AssertionError("no SigIgn line")


@pytest.mark.timeout(30)
def test_terminal_signals_to_the_reapers_group_do_not_reach_the_agent(tree: Tree) -> None:
    reaper = launch(tree, "echo", stdin=subprocess.PIPE, stdout=subprocess.PIPE, process_group=0)
    assert reaper.stdin is not None and reaper.stdout is not None
    try:
        pids = tree.pids()
        agent = pids[0]
        assert agent_pgid_of(reaper.pid) == agent
        assert os.getpgid(agent) == agent != os.getpgid(reaper.pid)
        # The agent has default dispositions: only its own group keeps the signals away.
        assert not _sig_ignored(agent, signal.SIGINT)
        assert _sig_ignored(reaper.pid, signal.SIGINT)
        assert os.readlink(f"/proc/{reaper.pid}/fd/1") == os.devnull
        for signo in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP, signal.SIGHUP):
            os.killpg(os.getpgid(reaper.pid), signo)
        time.sleep(0.1)
        reaper.stdin.write(b"still there?\n")
        reaper.stdin.flush()
        assert reaper.stdout.readline() == b"still there?\n"
        assert all(pid_alive(p) for p in [reaper.pid, *pids])
        reaper.stdin.close()
        assert reaper.wait(10) == 0
        assert [p for p in pids if pid_alive(p)] == []
    finally:
        reaper.kill()
        reaper.wait()


@pytest.mark.timeout(30)
def test_stdin_and_stdout_pass_through_byte_for_byte(tree: Tree) -> None:
    lines = [
        b'{"jsonrpc":"2.0","id":1,"method":"initialize"}\n',
        b"\x00\xff\xfe\r\t caf\xc3\xa9 \xe9\n",
        b"x" * 300_000 + b"\n",
        b"no newline at the end",
    ]
    reaper = launch(tree, "echo", stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=-1)
    out, err = reaper.communicate(b"".join(lines), timeout=20)
    assert out == b"".join(lines)
    assert err == b""  # nothing from the reaper when all is well
    assert reaper.returncode == 0


@pytest.mark.timeout(30)
def test_kill_leftover_tree_after_the_reaper_itself_was_sigkilled(tree: Tree) -> None:
    reaper = launch(tree, "sleep", stdin=subprocess.DEVNULL)
    pids = tree.pids()
    agent, others = pids[0], pids[1:]
    pgid = agent_pgid_of(reaper.pid)
    assert pgid == agent
    start = process_start_time(reaper.pid)
    assert start is not None
    marker = f"{MARKER_ENV}={reaper.pid}.{start}".encode()
    assert marker in Path(f"/proc/{others[-1]}/environ").read_bytes().split(b"\0")
    reaper.send_signal(signal.SIGKILL)
    assert reaper.wait(5) == -signal.SIGKILL
    wait_dead([agent])  # it had PR_SET_PDEATHSIG=SIGKILL
    assert all(pid_alive(p) for p in others)  # nobody cleaned up
    # In the group: child, middle; by the marker: the setsid grandchild and the daemon.
    assert kill_leftover_tree(reaper.pid, start, pgid) == len(others)
    wait_dead(others)
    assert kill_leftover_tree(reaper.pid, start, pgid) == 0


@pytest.mark.timeout(30)
def test_kill_leftover_tree_with_the_reaper_alive_asks_it_to_clean_up(tree: Tree) -> None:
    reaper = launch(tree, "sleep", stdin=subprocess.DEVNULL)
    pids = tree.pids()
    start = process_start_time(reaper.pid)
    assert start is not None
    assert kill_leftover_tree(reaper.pid, start, pids[0]) == 1  # only the reaper
    assert reaper.wait(5) == 128 + signal.SIGTERM
    assert [p for p in pids if pid_alive(p)] == []


@pytest.mark.timeout(30)
def test_kill_leftover_tree_never_touches_older_processes_or_its_own() -> None:
    older = subprocess.Popen(["sleep", "30"], process_group=0)
    try:
        start = process_start_time(older.pid)
        assert start is not None
        # A recycled pgid (and pid): the process is older than the "reaper" was.
        assert kill_leftover_tree(older.pid, start + 1, older.pid) == 0
        assert kill_leftover_tree(987_654_321, start + 1, older.pid) == 0
        me = os.getpid()
        my_start = process_start_time(me)
        assert my_start is not None
        assert kill_leftover_tree(me, my_start, os.getpgrp()) == 0
        assert kill_leftover_tree(1, process_start_time(1) or 0, None) == 0
        time.sleep(0.05)
        assert older.poll() is None
    finally:
        older.kill()
        older.wait()


@pytest.mark.timeout(30)
def test_parent_dead_before_start_runs_nothing(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    marker = tmp_path / "ran"
    argv = reaper_argv(("touch", str(marker)), parent_pid=gone.pid)
    done = subprocess.run(argv, capture_output=True, timeout=10)
    assert done.returncode == 1
    assert b"acp-reaper: " in done.stderr
    assert done.stdout == b""
    assert not marker.exists()


@pytest.mark.timeout(30)
def test_a_command_that_cannot_run_exits_127() -> None:
    argv = reaper_argv(("/nonexistent/agent",), parent_pid=os.getpid())
    done = subprocess.run(argv, capture_output=True, timeout=10)
    assert done.returncode == 127
    assert done.stderr.startswith(b"acp-reaper: cannot run '/nonexistent/agent'")


@pytest.mark.timeout(30)
def test_process_start_time() -> None:
    assert process_start_time(os.getpid()) == process_start_time(os.getpid())
    assert process_start_time(os.getpid()) is not None
    assert process_start_time(987_654_321) is None
    child = subprocess.Popen(["sleep", "5"])
    try:
        mine, theirs = process_start_time(os.getpid()), process_start_time(child.pid)
        assert mine is not None and theirs is not None and theirs >= mine
    finally:
        child.kill()
        child.wait()


@pytest.mark.timeout(30)
def test_the_reaper_process_imports_almost_nothing() -> None:
    boot = reaper_argv(("true",), parent_pid=1)[4].split("; sys.exit")[0]
    code = f"{boot}; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=10
    )
    modules = set(done.stdout.split())
    assert {m for m in modules if m.startswith("protocol")} == {
        "protocol",
        "protocol.agent",
        "protocol.agent.proc_tree",
        "protocol.agent.reaper",
    }
    assert not modules & {"typing", "enum", "signal", "subprocess", "re", "asyncio", "site"}
