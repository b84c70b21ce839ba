"""Read commands have no side effects on sinks: ``sessions list/show/tree/export``,
``events`` and ``status`` never resume deliveries (another process may be delivering to the
same JSONL file; a second writer could duplicate lines). Commands that change a session
(``sessions close``) still deliver, as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from control_plane.cli import app
from store import BindingSpec, NewEvent, SinkKind, Store
from tests.conftest import AGENT

runner = CliRunner()


def _store_with_undelivered_events(tmp_path: Path, db: str) -> tuple[Path, str]:
    sink = tmp_path / "sink.jsonl"
    with Store.open(db) as store:  # no delivery service: nothing reaches the sink here
        spawn = store.spawn(AGENT, "/w", BindingSpec(SinkKind.JSONL, str(sink)), None, "s")
        sid = spawn.session.id
        store.append_events(sid, None, [NewEvent("tick", {"i": i}) for i in range(5)])
    return sink, sid


def test_read_commands_never_deliver_to_sinks(tmp_path: Path, db: str) -> None:
    sink, sid = _store_with_undelivered_events(tmp_path, db)
    empty_config = tmp_path / "empty.toml"
    empty_config.write_text("")
    env = {"ACPCTL_CONFIG": str(empty_config)}
    for args in (
        ["sessions", "list"],
        ["sessions", "show", sid],
        ["sessions", "tree"],
        ["sessions", "export", sid, "-o", str(tmp_path / "t.jsonl")],
        ["events", sid],
        ["status"],
    ):
        result = runner.invoke(app, ["--db", db, *args], env=env)
        assert result.exit_code == 0, (args, result.output)
        assert not sink.exists(), f"{args} delivered to the sink"
    with Store.open(db) as store:
        assert [b.id for b in store.undelivered_bindings()]  # still waiting for its owner

    result = runner.invoke(app, ["--db", db, "sessions", "close", sid], env=env)
    assert result.exit_code == 0, result.output
    delivered = [json.loads(line)["kind"] for line in sink.read_text().splitlines()]
    assert delivered == ["session_created", *["tick"] * 5, "closed"]


def test_events_follow_tails_other_processes_commits_without_delivering(
    tmp_path: Path, db: str
) -> None:
    sink, sid = _store_with_undelivered_events(tmp_path, db)
    empty_config = tmp_path / "empty.toml"
    empty_config.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACPCTL_")}
    env["ACPCTL_CONFIG"] = str(empty_config)
    follower = subprocess.Popen(
        [sys.executable, "-m", "control_plane.cli", "--db", db, "events", sid, "-f", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert follower.stdout is not None
        first = json.loads(follower.stdout.readline())  # the stored events come first
        assert first["kind"] == "session_created"
        with Store.open(db) as store:  # another process: appends, then closes the session
            store.append_events(sid, None, [NewEvent("late", {})])
            store.close_session(sid, "done")
        follower.wait(timeout=60)  # it ends after the closed event
        rest = follower.stdout.read()  # through the same buffer as the first line
    finally:
        follower.kill()
    kinds = [first["kind"]] + [json.loads(line)["kind"] for line in rest.splitlines()]
    assert follower.returncode == 0, follower.stderr.read() if follower.stderr else ""
    assert kinds == ["session_created", *["tick"] * 5, "late", "closed"]
    assert not sink.exists()  # following delivered nothing
