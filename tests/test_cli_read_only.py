"""Read commands have no side effects on sinks: ``sessions list/show/tree/export``,
``events`` and ``status`` never resume deliveries (another process may be delivering to the
same JSONL file; a second writer could duplicate lines). Commands that change a session
(``sessions close``) still deliver, as before."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from control_plane.cli import app
from store import BindingSpec, NewEvent, SinkKind, Store
from tests.conftest import AGENT

runner = CliRunner()


def _store_with_undelivered_events(tmp_path: Path) -> tuple[Path, Path, str]:
    db, sink = tmp_path / "cp.db", tmp_path / "sink.jsonl"
    with Store.open(db) as store:  # no delivery service: nothing reaches the sink here
        spawn = store.spawn(AGENT, "/w", BindingSpec(SinkKind.JSONL, str(sink)), None, "s")
        sid = spawn.session.id
        store.append_events(sid, None, [NewEvent("tick", {"i": i}) for i in range(5)])
    return db, sink, sid


def test_read_commands_never_deliver_to_sinks(tmp_path: Path) -> None:
    db, sink, sid = _store_with_undelivered_events(tmp_path)
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
        result = runner.invoke(app, ["--db", str(db), *args], env=env)
        assert result.exit_code == 0, (args, result.output)
        assert not sink.exists(), f"{args} delivered to the sink"
    with Store.open(db) as store:
        assert [b.id for b in store.undelivered_bindings()]  # still waiting for its owner

    result = runner.invoke(app, ["--db", str(db), "sessions", "close", sid], env=env)
    assert result.exit_code == 0, result.output
    delivered = [json.loads(line)["kind"] for line in sink.read_text().splitlines()]
    assert delivered == ["session_created", *["tick"] * 5, "closed"]
