"""acpctl batch cut off (Ctrl-C, kill -9) and the same command again: nothing lost, nothing
run twice, and a turn cut off mid-way continued or sent again as the agent's restored
conversation says (docs/operations.md, "Interrupted turns")."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from state_machines.event_kinds import CONVERSATION_UPDATES
from state_machines.interrupted_turns import DEFAULT_CONTINUATION
from tests.support.direct_sql import is_postgres, query


def _count(db: str, sql: str) -> int:
    """``sql``'s count; 0 while a SQLite store's file or tables do not exist yet (the batch
    under test is still creating them)."""
    if not is_postgres(db) and not Path(db).exists():
        return 0
    try:
        return int(query(db, sql)[0][0])
    except sqlite3.OperationalError:
        return 0


@pytest.mark.full
@pytest.mark.timeout(240)
def test_batch_killed_repeatedly_finishes_every_task_exactly_once(tmp_path: Path, db: str) -> None:
    import random
    import signal
    import time

    rng = random.Random(7)
    tasks = tmp_path / "tasks.jsonl"
    n = 12
    tasks.write_text(
        "".join(
            json.dumps({"id": f"t{i}", "prompt": f"#chunks=10 #delay=30 task-{i}"}) + "\n"
            for i in range(n)
        )
    )
    inv = tmp_path / "inv.jsonl"
    agent = f"{sys.executable} -m protocol.example_agent --invocations-file {inv}"
    cmd = [
        sys.executable,
        "-m",
        "control_plane.cli",
        "--db",
        db,
        "batch",
        str(tasks),
        "--agent",
        agent,
        "-j",
        "3",
    ]
    env = dict(os.environ)
    kills = 0
    for _ in range(5):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(1.0, 3.0))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
    final = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert kills >= 3
    results = [json.loads(x) for x in (tmp_path / "tasks.results.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in results) == sorted(f"t{i}" for i in range(n))
    # Every task finished ok: one cut off mid-turn by a kill was continued (its agent
    # resumed with the prompt in its conversation) or sent again (it never reached it).
    assert {r["status"] for r in results} == {"ok"}, results
    assert final.returncode == 0, final.stderr[-2000:]

    # No task ran again after it completed or was interrupted: a task's prompt reached the
    # agent once per attempt at most.
    def runs_and_attempts() -> tuple[dict[str, int], dict[str, int]]:
        rows = query(db, "select payload, attempts from commands")
        attempts: dict[str, int] = {}
        for payload, count in rows:
            text = json.loads(payload)["content"][0]["text"]
            attempts[text] = attempts.get(text, 0) + count
        runs: dict[str, int] = {}
        for line in inv.read_text().splitlines():
            message = json.loads(line)["message"]
            runs[message] = runs.get(message, 0) + 1
        return runs, attempts

    runs, attempts = runs_and_attempts()
    for text, count in attempts.items():
        assert runs.get(text, 0) <= count, (text, runs.get(text), count)
    # --retry-failed has nothing left to do: every task is ok.
    again = subprocess.run(
        [*cmd, "--retry-failed"], env=env, capture_output=True, text=True, timeout=180
    )
    assert again.returncode == 0, again.stderr[-2000:]
    results = [json.loads(x) for x in (tmp_path / "tasks.results.jsonl").read_text().splitlines()]
    assert all(r["status"] == "ok" for r in results), results
    runs, attempts = runs_and_attempts()
    for text, count in attempts.items():
        assert runs.get(text, 0) <= count, (text, runs.get(text), count)


# What ``acpctl --help``, usage errors and ``config show`` must not import: the SDK schema
# (~0.8 s of pydantic models), SQLAlchemy + Alembic + the store, MCP, the runtime. Together
# they cost seconds of start-up; the commands that need them import them where they run.
@pytest.mark.timeout(180)
def test_ctrl_c_during_agent_start_loses_nothing_and_the_plain_rerun_finishes(
    tmp_path: Path, db: str
) -> None:
    """A terminal's Ctrl-C goes to the whole foreground process group. The agents are not in
    it (each runs in its own group, under its reaper): they are not killed by it, nothing is
    failed, and the same command run again finishes every task."""
    import signal
    import time

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": f"t{i}", "prompt": f"p{i}"}) + "\n" for i in range(4))
    )
    agent = f"{sys.executable} -m protocol.example_agent"
    slow_start = f"sh -c 'sleep 2; exec {agent}'"  # still starting when Ctrl-C comes
    cmd = [sys.executable, "-m", "control_plane.cli", "--db", db, "batch", str(tasks)]
    cmd += ["--agent", slow_start, "-j", "4"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if _count(db, "select count(*) from sessions") == 4:
            break
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    states = [r[0] for r in query(db, "select state from commands")]
    assert "failed" not in states, (states, err[-2000:])
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    results = [json.loads(x) for x in (tmp_path / "tasks.results.jsonl").read_text().splitlines()]
    assert sorted(r["status"] for r in results) == ["ok"] * 4


@pytest.mark.timeout(180)
@pytest.mark.parametrize("policy", ["continue", "report"])
def test_ctrl_c_mid_turn_is_an_interruption_and_costs_no_attempt(
    tmp_path: Path, db: str, policy: str
) -> None:
    """With max_attempts=1, Ctrl-C while the turn runs: the stop costs no attempt (the
    budget grows by one), so the plain rerun does not fail the task. The agent restored its
    conversation with the prompt in it, so the prompt is never sent a second time: by
    default the rerun continues the turn (the continuation prompt) and the task ends ok
    (exit 0); with ``--interrupted report`` it ends ``interrupted`` (exit 1). What Ctrl-C
    printed said which."""
    import signal
    import time

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t0", "prompt": "long #chunks=100 #delay=50"}) + "\n")
    received = tmp_path / "invocations.jsonl"
    agent = f"{sys.executable} -m protocol.example_agent --invocations-file {received}"
    agent += f" --state-file {tmp_path / 'agent-state.json'}"
    cmd = [sys.executable, "-m", "control_plane.cli", "--db", db, "batch", str(tasks)]
    cmd += ["--agent", agent]
    if policy == "report":
        cmd += ["--interrupted", "report"]
    env = {**os.environ, "ACPCTL_MAX_ATTEMPTS": "1"}

    def streamed() -> int:
        return _count(db, "select count(*) from events where kind = 'session_update'")

    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while streamed() < 3:  # the turn is streaming its chunks
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    said = err.decode()
    assert "1 task(s) cut off mid-turn" in said, said[-2000:]
    assert ("continues them" in said) == (policy == "continue"), said[-2000:]
    rows = query(db, "select state, attempts, max_attempts from commands")
    assert rows == [("running", 1, 2)], (rows, said[-2000:])
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    results = [json.loads(x) for x in (tmp_path / "tasks.results.jsonl").read_text().splitlines()]
    prompts = [json.loads(line)["message"] for line in received.read_text().splitlines()]
    assert prompts[0] == "long #chunks=100 #delay=50"
    if policy == "continue":
        assert [r["status"] for r in results] == ["ok"], again.stderr[-2000:]
        assert again.returncode == 0
        assert results[0]["attempts"] == 2
        # never sent twice into the conversation the agent kept: continued instead
        assert prompts[1:] == [DEFAULT_CONTINUATION]
    else:
        assert [r["status"] for r in results] == ["interrupted"], again.stderr[-2000:]
        assert again.returncode == 1
        assert len(prompts) == 1


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stop", ["ctrl-c", "kill-9"])
def test_a_turn_cut_off_before_the_agent_answered_goes_by_what_the_agent_restored(
    tmp_path: Path, db: str, stop: str
) -> None:
    """Cut off after the agent received the prompt but before it answered anything (a model
    still thinking, or an agent still starting its tools): nothing of the conversation is in
    the log, so the agent's own word decides (its load's replay, asked for instead of a
    resume). Ctrl-C: the agent is cancelled and, as this one does, saves the cancelled turn:
    its conversation holds the prompt, and the rerun continues it. kill -9: the agent dies
    with the control plane before it saves the turn (this one saves a turn when it ends):
    the prompt is not in its conversation and is sent again; a continuation of a prompt
    never received would ask for nothing. Either way the task ends ok."""
    import signal
    import time

    # Thinking outlasts the stop even on a loaded machine: an answer before it would be in
    # the log. Ctrl-C's shutdown takes a while (4 s did not do, beside a CPU hog); a kill -9
    # is at once, and its rerun, sent the prompt again, thinks as long again.
    think_ms = 10000 if stop == "ctrl-c" else 4000
    prompt = f"slow start #think={think_ms} #chunks=2"
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t0", "prompt": prompt}) + "\n")
    received = tmp_path / "invocations.jsonl"
    agent = f"{sys.executable} -m protocol.example_agent --invocations-file {received}"
    agent += f" --state-file {tmp_path / 'agent-state.json'}"
    cmd = [sys.executable, "-m", "control_plane.cli", "--db", db, "batch", str(tasks)]
    cmd += ["--agent", agent]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while not (received.exists() and received.read_text().strip()):  # the agent has it
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT if stop == "ctrl-c" else signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == (130 if stop == "ctrl-c" else -9), err.decode()[-2000:]
    # Its slash commands, sent after session/new, may be recorded under the prompt's
    # command: no sign that it had the prompt (store/ops/interrupted.py reached_agent).
    updates = "select payload from events where kind = 'session_update' and command_id is not null"
    kinds = [json.loads(p[0])["params"]["update"]["sessionUpdate"] for p in query(db, updates)]
    assert not set(kinds) & CONVERSATION_UPDATES, kinds  # nothing of the conversation
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    results = [json.loads(x) for x in (tmp_path / "tasks.results.jsonl").read_text().splitlines()]
    assert [(r["status"], r["attempts"]) for r in results] == [("ok", 2)]
    prompts = [json.loads(line)["message"] for line in received.read_text().splitlines()]
    sent = query(db, "select payload from events where kind = 'prompt' order by seq")
    continued = [bool(json.loads(p[0]).get("continuation")) for p in sent]
    hows = query(db, "select payload from events where kind = 'agent_started' order by seq")
    assert [json.loads(h[0])["how"] for h in hows] == ["new", "loaded"]
    if stop == "ctrl-c":
        assert prompts == [prompt, DEFAULT_CONTINUATION]
        assert continued == [False, True]
    else:
        assert prompts == [prompt, prompt]
        assert continued == [False, False]
