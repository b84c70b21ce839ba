"""A batch budget: all the tasks together stop at it; what had not run is cancelled."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from typer.testing import CliRunner

from control_plane.cli import app
from tests.support.store_contents import nothing_stored

runner = CliRunner()


def _tasks(tmp: Path, n: int) -> Path:
    path = tmp / "tasks.jsonl"
    prompts = [{"id": f"t{i}", "prompt": f"#chunks=30 #delay=10 task {i}"} for i in range(n)]
    lines = [json.dumps(p) for p in prompts]
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _batch(tmp: Path, db: str, tasks: Path, *extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    agent = f"{sys.executable} -m protocol.example_agent --state-file {tmp / 'state.json'}"
    args = ["--db", db, "batch", str(tasks), "--agent", agent, "-j", "2"]
    env = {"ACPCTL_CONFIG": str(tmp / "c.toml")}
    result = runner.invoke(app, [*args, "--json", *extra], env=env)
    return result.exit_code, json.loads(result.stdout)


def test_the_batch_stops_at_its_token_budget_and_cancels_the_rest(tmp_path: Path, db: str) -> None:
    (tmp_path / "c.toml").write_text("")
    tasks = _tasks(tmp_path, 8)
    code, report = _batch(tmp_path, db, tasks, "--budget-tokens", "60")
    assert code == 1  # not every task finished
    statuses = [row["status"] for row in report["tasks"]]
    assert 2 <= statuses.count("ok") < 8  # each task uses 33 tokens: two reach 60
    cancelled = [row for row in report["tasks"] if row["status"] == "cancelled"]
    assert cancelled and len(cancelled) + statuses.count("ok") == 8
    assert all("budget exceeded: batch tokens" in row["error"] for row in cancelled)
    assert report["budgetReached"]["budget"] == "batch tokens"
    # What the agents reported, task by task (a task cut short reports what it used so far)
    per_task = sum((row["usage"] or {}).get("totalTokens", 0) for row in report["tasks"])
    assert report["usage"]["totalTokens"] == per_task >= 33 * statuses.count("ok")
    # The rerun resumes the same batch: nothing runs again, the stop holds.
    again_code, again = _batch(tmp_path, db, tasks, "--budget-tokens", "60")
    assert again_code == 1
    assert [row["status"] for row in again["tasks"]] == statuses


def test_the_configured_batch_budget_applies_without_the_option(tmp_path: Path, db: str) -> None:
    (tmp_path / "c.toml").write_text("[budgets.batch]\ntokens = 30\n")
    code, report = _batch(tmp_path, db, _tasks(tmp_path, 4))
    assert code == 1 and report["budgetReached"]["limit"] == 30


def test_a_bad_budget_in_the_configuration_is_a_clear_error(tmp_path: Path, db: str) -> None:
    (tmp_path / "c.toml").write_text('[budgets.session]\naction = "stop"\n')
    result = runner.invoke(
        app,
        ["--db", db, "batch", str(_tasks(tmp_path, 1))],
        env={"ACPCTL_CONFIG": str(tmp_path / "c.toml")},
    )
    assert result.exit_code == 2
    assert "a budget needs tokens or cost_usd" in result.output
    assert nothing_stored(db)  # refused before anything was written
