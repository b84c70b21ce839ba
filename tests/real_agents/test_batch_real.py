"""``acpctl batch`` in front of the real agents: kill -9 during a tool call, then the same
command again, then ``--retry-failed``."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import RealAgent
from .cp_helpers import (
    API_OF,
    SLOW_TOOL,
    ControlPlaneFiles,
    duplicated,
    gone_within,
    tool_process,
    turn_starts,
    wait_for,
)


def _results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.timeout(150)
def test_kill_9_of_batch_during_a_tool_call(real_agent: RealAgent, tmp_path: Path) -> None:
    cp = ControlPlaneFiles(tmp_path / "cp", real_agent.name)
    cp.write_config(real_agent.launch, permission="allow")  # nobody to ask in a batch
    cwd, server, api = real_agent.cwd, real_agent.server, API_OF[real_agent.name]
    side = cwd / "side.txt"
    tasks = cp.root / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "slow", "prompt": SLOW_TOOL, "cwd": str(cwd)}) + "\n")
    results = cp.root / "tasks.results.jsonl"
    args = ("batch", str(tasks), "--agent", real_agent.name, "-j", "1")

    batch = cp.popen(*args, log=cp.root / "batch-1.log")
    try:
        found = wait_for(lambda: tool_process(cwd) or batch.poll() is not None, 60)
        assert found and found is not True, (batch.poll(), (cp.root / "batch-1.log").read_text())
        seen_at = time.monotonic()
        os.kill(batch.pid, signal.SIGKILL)
        batch.wait(10)
    finally:
        if batch.poll() is None:
            batch.kill()
    gone, elapsed, left = gone_within(found[1], 1.0)
    assert gone, f"agent tree still alive {elapsed:.2f}s after kill -9 of batch: {left}"
    time.sleep(max(0.0, seen_at + 4.5 - time.monotonic()))
    assert not side.exists(), "the killed tool command finished its side effect"

    # The same command again: it resumes the batch.
    before = len(server.requests)
    rerun = cp.run(*args, timeout=120)
    (row,) = _results(results)
    after = [r for r in server.requests[before:] if r.api == api]
    kinds = [e["kind"] for e in cp.json("events", row["sessionId"], "--json")]
    lost = "context_lost" in kinds
    if real_agent.name in ("claude", "codex"):
        assert not lost, kinds  # both resume the session
    assert duplicated(after, SLOW_TOOL) == []
    if lost:
        # The agent could not restore the conversation: the prompt was sent again, once.
        assert row["status"] == "ok", (row, rerun.stdout, rerun.stderr)
        assert rerun.returncode == 0
        assert len(turn_starts(after, SLOW_TOOL)) == 1, kinds
        assert side.read_text() == "ran\n"
    else:
        # It restored the conversation with the prompt in it: not sent again.
        assert row["status"] == "interrupted", (row, rerun.stdout, rerun.stderr)
        assert rerun.returncode == 1
        assert turn_starts(after, SLOW_TOOL) == [], kinds
        assert not side.exists()
    assert row["attempts"] == (2 if lost else 1)

    # --retry-failed finishes what is not ok, in a new session; an ok task is left alone.
    before = len(server.requests)
    retry = cp.run(*args, "--retry-failed", timeout=120)
    assert retry.returncode == 0, (retry.stdout, retry.stderr)
    (final,) = _results(results)
    assert final["status"] == "ok", final
    assert side.read_text() == "ran\n"  # the side effect happened exactly once in all
    retried = [r for r in server.requests[before:] if r.api == api]
    if lost:
        assert final["sessionId"] == row["sessionId"] and retried == []
    else:
        assert final["sessionId"] != row["sessionId"] and final["generation"] == 1
        assert len(turn_starts(retried, SLOW_TOOL)) == 1
