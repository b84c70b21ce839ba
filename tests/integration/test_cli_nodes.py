"""``acpctl serve`` / ``batch`` ``--node-name`` and ``--label``, ``[node]`` in the config, and
``acpctl nodes list``: a node's name and labels given on the command line are what the store
lists and what placement matches; bad names and labels are refused before anything starts."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from control_plane import ControlPlane, Placement
from control_plane.cli import app
from control_plane.config import ConfigError, load_config
from store.placement import (
    InvalidLabel,
    InvalidNodeName,
    InvalidPlacement,
    check_node_labels,
    check_node_name,
)
from tests.conftest import eventually
from tests.support.cp_harness import FAST, example_agent
from tests.support.direct_sql import query
from tests.support.remote_client import ListenServer

TOO_LONG = "n" * 254


def acpctl(db: str, *args: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "control_plane.cli", "--db", db]
    if config is not None:
        argv += ["--config", str(config)]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=120)


def listed(db: str) -> dict[str, Any]:
    done = acpctl(db, "nodes", "list", "--json")
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def node_by_pid(db: str, pid: int) -> dict[str, Any] | None:
    return next((n for n in listed(db)["nodes"] if n["pid"] == pid), None)


def listed_node(db: str, pid: int) -> dict[str, Any]:
    """The row of the node process ``pid``, once it is listed."""
    row = eventually(lambda: node_by_pid(db, pid), 30, f"the node of pid {pid} listed")
    assert row is not None
    return row


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--label", "=x"], "the key before '=' is empty"),
        (["--label", "a="], "the value after '=' is empty"),
        (["--label", "has space"], "no spaces"),
        (["--label", "zone=a", "--label", "zone=b"], "one value per key"),
        (["--node-name", "my node"], "no spaces"),
        (["--node-name", TOO_LONG], "254 characters long; at most 253"),
    ],
)
@pytest.mark.parametrize("command", ["serve", "serve --listen", "batch"])
def test_a_bad_node_name_or_label_is_exit_2_and_starts_nothing(
    tmp_path: Path, command: str, args: list[str], says: str
) -> None:
    db = tmp_path / "cp.db"
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t", "prompt": "hi"}) + "\n")
    argv = {
        "serve": ["serve", "--agent", "example"],
        "serve --listen": ["serve", "--listen", "127.0.0.1:0", "--agent", "example"],
        "batch": ["batch", str(tasks), "--agent", "example"],
    }[command]
    done = CliRunner().invoke(app, ["--db", str(db), *argv, *args], env={})
    assert done.exit_code == 2, done.output
    flag = args[0]
    assert f"{flag}: " in done.stderr and says in done.stderr, done.stderr
    assert not db.exists()  # no store opened, so no node, no agent, no task
    assert not (tmp_path / "tasks.results.jsonl").exists()


@pytest.mark.parametrize(
    ("section", "says"),
    [
        ('labels = ["=x"]', "node.labels"),
        ('labels = ["gpu", "gpu=a100"]', "one value per key"),
        ('name = "my node"', "node.name"),
        (f'name = "{TOO_LONG}"', "at most 253"),
    ],
)
def test_a_bad_node_section_is_a_config_error(tmp_path: Path, section: str, says: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f"[node]\n{section}\n")
    with pytest.raises(ConfigError, match=says):
        load_config(str(config), environ={})
    done = CliRunner().invoke(app, ["--config", str(config), "config", "show"], env={})
    assert done.exit_code == 2 and says in done.stderr


def test_the_label_form_words_and_pairs_alike_everywhere(tmp_path: Path) -> None:
    # Bare words (what configurations held so far) and KEY=VALUE pairs; sorted, once each.
    assert check_node_labels(["shared-volume", "zone=eu-1", "gpu", "gpu"]) == (
        "gpu",
        "shared-volume",
        "zone=eu-1",
    )
    assert check_node_labels(["example.com/disk=ssd"]) == ("example.com/disk=ssd",)
    assert check_node_name("build-1.example.com") == "build-1.example.com"
    for bad in ("", "=x", "a=", "a=b=c", "a b", "-a", "a,b", "x" * 129):
        with pytest.raises(InvalidLabel):
            check_node_labels([bad])
    for bad_name in ("", "my node", "-a", "a/b", TOO_LONG):
        with pytest.raises(InvalidNodeName):
            check_node_name(bad_name)
    config = tmp_path / "config.toml"
    config.write_text('[node]\nname = "edge-1"\nlabels = ["shared", "zone=eu-1", "shared"]\n')
    node = load_config(str(config), environ={}).node
    assert (node.name, node.labels) == ("edge-1", ["shared", "zone=eu-1"])
    # A placement is held to the same form (one it could never match is refused up front)...
    assert Placement(labels=("zone=eu-1", "shared")).allows("n", ("shared", "zone=eu-1", "x"))
    assert not Placement(labels=("zone=eu-1",)).allows("n", ("zone=eu-2",))
    for labels in (("=x",), ("zone=a", "zone=b"), ("a b",)):
        with pytest.raises(InvalidPlacement):
            Placement(labels=labels)
    with pytest.raises(InvalidPlacement):
        Placement(node="my node")
    # ...but one stored before the form existed still reads back, as it was.
    legacy = Placement.from_json(json.dumps({"labels": ["old label"]}))
    assert legacy is not None and legacy.labels == ("old label",)
    assert legacy.allows("n", ("old label",)) and not legacy.allows("n", ("old",))


def _run_by(db: str, session_id: str) -> str:
    """The owner id of the node that started the session's agent (its agent_started)."""
    rows = query(
        db,
        "SELECT payload FROM events WHERE session_id = ? AND kind = 'agent_started'",
        (session_id,),
    )
    return str(json.loads(rows[-1][0]).get("node", "")) if rows else ""


@pytest.mark.backend_specific  # placement goes by claims on PostgreSQL, by discovery on SQLite
@pytest.mark.timeout(240)
def test_serve_nodes_named_and_labelled_by_flags_are_listed_and_placed_on(
    tmp_path: Path, db: str
) -> None:
    """Two ``serve --listen`` nodes on one store, one named and labelled by flags: ``nodes
    list`` shows each with its lease and load; a session placed on the label, and one placed
    on the other's name, each run on that node; a node that stops stays listed, stopped."""
    eu = ListenServer(
        tmp_path / "eu", "--node-name", "eu-1", "--label", "zone=eu", "--label", "gpu", db=db
    )
    us = ListenServer(tmp_path / "us", "--node-name", "us-1", "--label", "zone=us", db=db)
    for server in (eu, us):
        server.tmp.mkdir()
    try:
        eu.start()
        us.start()
        assert eu.proc is not None and us.proc is not None
        eu_row = listed_node(db, eu.proc.pid)
        us_row = listed_node(db, us.proc.pid)
        report = listed(db)
        assert report["backend"] == ("postgresql" if "://" in db else "sqlite")
        assert report["leasesDecide"] is ("://" in db)
        assert (eu_row["name"], eu_row["labels"]) == ("eu-1", ["gpu", "zone=eu"])
        assert (us_row["name"], us_row["labels"]) == ("us-1", ["zone=us"])
        for row in (eu_row, us_row):
            assert row["state"] == "live" and row["live"] is True
            assert 0 < row["leaseLeftS"] <= 15.0 and row["heartbeatAgoS"] >= 0
            assert row["capacity"] == 16 and row["runningTurns"] == 0
            assert row["startedAt"].endswith("+00:00") and row["stoppedAt"] is None
        text = acpctl(db, "nodes", "list")
        assert text.returncode == 0, text.stderr
        assert "eu-1" in text.stdout and "zone=eu" in text.stdout and "us-1" in text.stdout
        assert ("no fleet" in text.stdout) is ("://" not in db)
        status = acpctl(db, "status", "--json")
        assert status.returncode == 0, status.stderr
        assert {n["name"] for n in json.loads(status.stdout)["nodes"]} == {"eu-1", "us-1"}

        # Placement uses them: by the label the flag gave, and by the name.
        settings = replace(FAST, log_dir=str(tmp_path / "logs-client"))
        with ControlPlane.open(db, settings=settings, run_sessions=False) as cp:
            by_label = cp.spawn(
                example_agent(tmp_path),
                tmp_path,
                "hi eu",
                idempotency_key="eu",
                placement=Placement(labels=("zone=eu",)),
            )
            by_name = cp.spawn(
                example_agent(tmp_path),
                tmp_path,
                "hi us",
                idempotency_key="us",
                placement=Placement(node="us-1"),
            )
            for spawned in (by_label, by_name):
                assert spawned.command is not None
                assert cp.wait(spawned.command.id, 90).ok
        assert _run_by(db, by_label.session.id) == eu_row["id"]
        assert _run_by(db, by_name.session.id) == us_row["id"]

        assert eu.terminate() == 0
        gone = listed_node(db, eu_row["pid"])
        assert gone["state"] == "stopped" and gone["live"] is False
        assert gone["stoppedAt"] is not None and gone["labels"] == ["gpu", "zone=eu"]
    finally:
        eu.stop()
        us.stop()


@pytest.mark.timeout(180)
def test_batch_and_stdio_serve_take_the_flags_over_the_config(tmp_path: Path) -> None:
    """``[node]`` of an existing configuration (a bare-word label) is what a node is without
    flags; ``--label`` replaces the labels and ``--node-name`` the name, for ``batch`` and for
    ``serve`` on stdio."""
    db = str(tmp_path / "cp.db")
    config = tmp_path / "config.toml"
    config.write_text('[node]\nname = "from-config"\nlabels = ["shared"]\n')
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t1", "prompt": "hi", "cwd": str(tmp_path)}) + "\n")
    done = acpctl(db, "batch", str(tasks), "--agent", "example", config=config)
    assert done.returncode == 0, done.stderr
    done = acpctl(
        db,
        "batch",
        str(tasks),
        "--agent",
        "example",
        "--batch-id",
        "b2",
        "--node-name",
        "batch-1",
        "--label",
        "role=batch",
        config=config,
    )
    assert done.returncode == 0, done.stderr
    rows = {n["name"]: n for n in listed(db)["nodes"]}
    assert rows["from-config"]["labels"] == ["shared"]
    assert rows["batch-1"]["labels"] == ["role=batch"]
    assert {r["state"] for r in rows.values()} == {"stopped"}  # both batches ended

    argv = [sys.executable, "-m", "control_plane.cli", "--db", db, "--config", str(config)]
    serve = subprocess.Popen(
        [*argv, "serve", "--agent", "example", "--label", "k=v"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "serve.log").open("w"),
    )
    try:
        row = listed_node(db, serve.pid)
        assert (row["name"], row["labels"], row["state"]) == ("from-config", ["k=v"], "live")
    finally:
        assert serve.stdin is not None
        serve.stdin.close()  # the editor went away: serve stops
        assert serve.wait(60) == 0, (tmp_path / "serve.log").read_text()[-2000:]
    assert listed_node(db, serve.pid)["state"] == "stopped"


def test_nodes_list_on_a_store_no_node_ran_on(tmp_path: Path) -> None:
    from store import Store

    db = str(tmp_path / "cp.db")
    Store.open(db).close()
    assert listed(db)["nodes"] == []
    done = acpctl(db, "nodes", "list")
    assert done.returncode == 0 and "no nodes" in done.stdout and "no fleet" in done.stdout
    missing = acpctl(str(tmp_path / "none.db"), "nodes", "list")
    assert missing.returncode == 2 and "no store" in missing.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["nodes", "--help"],
        ["serve", "--label", "=x"],  # refused before the store, the SDK or an agent loads
        ["batch", "tasks.jsonl", "--node-name", "my node"],
        ["config", "show", "--json"],  # with a [node] section (below)
    ],
)
def test_node_flags_and_section_are_checked_without_loading_the_runtime(
    tmp_path: Path, args: list[str]
) -> None:
    from tests.integration.test_cli import HEAVY_MODULES, _probe

    (tmp_path / "acpctl").mkdir()  # the probe's XDG_CONFIG_HOME is tmp_path
    (tmp_path / "acpctl" / "config.toml").write_text('[node]\nlabels = ["zone=eu-1"]\n')
    report, output = _probe(tmp_path, args, HEAVY_MODULES)
    assert report["loaded"] == [], output
    assert report["code"] == (0 if args[-1] in ("--help", "--json") else 2), output
