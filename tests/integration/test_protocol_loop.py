from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pykka
import pytest

from protocol.agent.spawn import agent_environment
from protocol.loop import ProtocolLoop, wait_off_loop
from tests.conftest import pid_alive


class SlowActor(pykka.ThreadingActor):
    def answer(self, delay: float) -> str:
        time.sleep(delay)
        return "done"


def test_loop_keeps_ticking_while_waiting_for_a_busy_actor() -> None:
    loop = ProtocolLoop()
    actor = SlowActor.start().proxy()
    gaps: list[float] = []

    async def ticker(stop: asyncio.Event) -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async def needs_actor_answer() -> str:
        stop = asyncio.Event()
        tick = asyncio.ensure_future(ticker(stop))
        future = actor.answer(1.0)  # a pykka future; never awaited on the loop directly
        answer: str = await wait_off_loop(future.get)
        stop.set()
        await tick
        return answer

    busy_caller = threading.Thread(target=lambda: actor.answer(0.5).get())
    busy_caller.start()  # another thread blocks on the same actor meanwhile
    try:
        assert loop.call(needs_actor_answer(), timeout=10) == "done"
    finally:
        busy_caller.join()
        actor.stop()
        loop.stop()
    assert len(gaps) > 50  # it ticked all along (the actor was busy for ~1.5 s)
    assert max(gaps) < 0.25


def test_call_from_the_loop_thread_is_refused_instead_of_deadlocking() -> None:
    loop = ProtocolLoop()

    async def inner() -> None:
        await asyncio.sleep(0)

    async def outer() -> str:
        try:
            loop.call(inner())
        except RuntimeError as exc:
            return str(exc)
        return "no error"

    try:
        assert "deadlock" in loop.call(outer(), timeout=5)
    finally:
        loop.stop()


def test_agent_environment_holds_the_allowlist_and_configured_values_only() -> None:
    source = {"PATH": "/bin", "HOME": "/h", "ANTHROPIC_API_KEY": "secret", "AWS_TOKEN": "t"}
    env = agent_environment({"FOO": "bar"}, source=source)
    assert env == {"PATH": "/bin", "HOME": "/h", "FOO": "bar"}
    forwarded = agent_environment({}, passthrough=["ANTHROPIC_API_KEY"], source=source)
    assert forwarded["ANTHROPIC_API_KEY"] == "secret" and "AWS_TOKEN" not in forwarded


_DRIVER = """
import sys, time
from tests.support.agent_harness import AgentHarness
from pathlib import Path
h = AgentHarness(Path(sys.argv[1]), db=sys.argv[2])
conn = h.connect()
h.run(conn.start())
print(conn.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_kill_9_of_the_control_plane_takes_its_agents_with_it(tmp_path: Path, db: str) -> None:
    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, str(tmp_path), db], stdout=subprocess.PIPE, text=True
    )
    assert driver.stdout is not None
    agent_pid = int(driver.stdout.readline())
    assert pid_alive(agent_pid)
    driver.send_signal(signal.SIGKILL)
    driver.wait(10)
    deadline = time.monotonic() + 5
    while pid_alive(agent_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(agent_pid)
