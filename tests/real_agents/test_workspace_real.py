"""A real agent in a worktree workspace, cut off by kill -9 after its tool call edited a
file: the rerun puts the files back to the last checkpoint before the turn goes on, so the
edit ends up in the file exactly once, whether the agent continues (it kept the
conversation) or gets the prompt again (it lost it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from state_machines.interrupted_turns import DEFAULT_CONTINUATION

from .conftest import RealAgent
from .cp_helpers import ControlPlaneFiles, wait_for

EDIT = "echo edit >> notes.txt"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.mark.timeout(180)
def test_kill_9_after_an_edit_then_the_rerun_leaves_the_edit_in_the_file_once(
    real_agent: RealAgent, tmp_path: Path
) -> None:
    repo = real_agent.cwd
    _git(repo, "init", "-q")
    (repo / "notes.txt").write_text("base\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    go = tmp_path / "go"  # once it exists, the tool command no longer waits
    prompt = f"RUN {EDIT}; test -e {go} || sleep 60"
    cp = ControlPlaneFiles(tmp_path / "cp", real_agent.name)
    # The stand-in model follows the last directive line of the last user message: this
    # continuation makes it do what a model told "make again the edits still needed" does.
    continuation = f"{DEFAULT_CONTINUATION}\nRUN {EDIT}"
    cp.write_config(
        real_agent.launch, permission="allow", by_name=True,
        top={"continuation_prompt": continuation},
    )  # fmt: skip
    tasks = cp.root / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "edit", "prompt": prompt, "cwd": str(repo)}) + "\n")
    args = ("batch", str(tasks), "--agent", real_agent.name, "--workspace", "worktree")
    log = cp.root / "batch-1.log"
    batch = cp.popen(*args, log=log)
    try:

        def edited() -> Path | None:
            for notes in (cp.root / "workspaces").rglob("notes.txt"):
                if notes.read_text() == "base\nedit\n":
                    return notes
            return None

        found = wait_for(lambda: edited() or batch.poll() is not None, 90)
        assert isinstance(found, Path), (batch.poll(), log.read_text()[-3000:])
        os.kill(batch.pid, signal.SIGKILL)
        batch.wait(10)
    finally:
        if batch.poll() is None:
            batch.kill()
    go.write_text("")
    rerun = cp.run(*args, timeout=150)
    assert rerun.returncode == 0, (rerun.stdout, rerun.stderr)
    (row,) = [json.loads(x) for x in (cp.root / "tasks.results.jsonl").read_text().splitlines()]
    assert row["status"] == "ok", row
    assert found.read_text() == "base\nedit\n"  # exactly once: restored, then edited again
    events = cp.json("events", row["sessionId"], "--json")
    kinds = [e["kind"] for e in events]
    assert kinds.count("workspace_restored") == 1, kinds
    restored = next(e for e in events if e["kind"] == "workspace_restored")
    assert "error" not in restored["payload"], restored
    # The checkpoint after the turn holds the edit once, and the user's checkout none.
    assert row["workspace"]["diffstat"].startswith("1 file changed, 1 insertion"), row
    assert (repo / "notes.txt").read_text() == "base\n"
