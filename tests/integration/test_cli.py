"""acpctl: bad input gives clear messages, non-zero exits and writes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import control_plane
from control_plane.cli import app
from tests.support.store_contents import nothing_stored

runner = CliRunner()


def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env=env or {})
    return result.exit_code, result.output


def _files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def test_batch_with_missing_tasks_file_exits_2(tmp_path: Path, db: str) -> None:
    code, output = _run("--db", db, "batch", str(tmp_path / "nope.jsonl"))
    assert code == 2 and "does not exist" in output
    assert _files(tmp_path) == []
    assert nothing_stored(db)


def test_batch_reports_every_invalid_line_with_its_number_before_running(
    tmp_path: Path, db: str
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        '{"id": "a", "prompt": "ok"}\n'
        "not json\n"
        '{"id": "a", "prompt": "dup"}\n'
        '{"prompt": "no id"}\n'
        '{"id": "t", "prompt": "x", "timeout": -1}\n'
        '{"id": "c", "prompt": "x", "cwd": "missing-dir"}\n'
        '{"id": "e", "prompt": "x", "colour": "red"}\n'
    )
    code, output = _run("--db", db, "batch", str(tasks))
    assert code == 2
    for line in ("line 2", "line 3", "line 4", "line 5", "line 6", "line 7"):
        assert line in output
    assert "line 1:" not in output
    assert _files(tmp_path) == ["tasks.jsonl"]  # no store, no results file
    assert nothing_stored(db)


def test_unknown_session_id_exits_2_for_every_session_command(tmp_path: Path, db: str) -> None:
    from store import Store

    Store.open(db).close()
    for args in (
        ["sessions", "show", "nope"],
        ["sessions", "export", "nope", "-o", str(tmp_path / "x.jsonl")],
        ["sessions", "close", "nope"],
        ["sessions", "cancel", "nope"],
        ["events", "nope"],
    ):
        code, output = _run("--db", db, *args)
        assert code == 2, args
        assert "no session with id 'nope'" in output
    assert not (tmp_path / "x.jsonl").exists()


# SQLite-only: a missing store is a missing file; a PostgreSQL database is its admin's to create.
def test_read_commands_refuse_a_missing_store_without_creating_it(tmp_path: Path) -> None:
    code, output = _run("--db", str(tmp_path / "none.db"), "sessions", "list")
    assert code == 2 and "no store" in output
    assert _files(tmp_path) == []


@pytest.mark.parametrize(
    ("agent", "message"),
    [("", "must not be empty"), ("   ", "must not be empty"), ('python "open', "No closing")],
)
def test_an_unusable_agent_command_exits_2_before_anything_is_written(
    tmp_path: Path, db: str, agent: str, message: str
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "hello"}\n')
    config = tmp_path / "empty.toml"
    config.write_text("")
    for command in (["serve", "--agent", agent], ["batch", str(tasks), "--agent", agent]):
        code, output = _run("--config", str(config), "--db", db, *command)
        assert code == 2, (command, output)
        assert message in output
        assert "Traceback" not in output
    assert _files(tmp_path) == ["empty.toml", "tasks.jsonl"]
    assert nothing_stored(db)


def test_an_unusable_agent_of_one_task_stops_the_batch_before_any_task_runs(
    tmp_path: Path, db: str
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        '{"id": "a", "prompt": "hello"}\n{"id": "b", "prompt": "hi", "agent": "python \\"open"}\n'
    )
    config = tmp_path / "empty.toml"
    config.write_text("")
    code, output = _run("--config", str(config), "--db", db, "batch", str(tasks))
    assert code == 2, output
    assert "task 'b'" in output and "No closing quotation" in output
    assert _files(tmp_path) == ["empty.toml", "tasks.jsonl"]  # no store, no results
    assert nothing_stored(db)


def test_bad_configuration_values_are_named(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[limits]\nmax_running_turns = 0\n[permissions]\ndefault = "maybe"\n')
    code, output = _run("--config", str(config), "config", "show")
    assert code == 2
    assert "limits.max_running_turns" in output and "permissions.default" in output
    code, output = _run("config", "show", env={"ACPCTL_TURN_TIMEOUT": "soon"})
    assert code == 2 and "timeouts.turn_s" in output
    config.write_text("this is = not toml [")
    code, output = _run("--config", str(config), "config", "show")
    assert code == 2 and "not valid TOML" in output


def test_config_show_prints_the_effective_configuration_with_secrets_hidden(
    tmp_path: Path,
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[agents.claude]\ncommand = "npx x"\nenv = { ANTHROPIC_API_KEY = "sk-secret" }\n'
    )
    code, output = _run(
        "--config", str(config), "config", "show", "--json", env={"ACPCTL_MAX_RUNNING_TURNS": "7"}
    )
    assert code == 0
    shown = json.loads(output)
    assert shown["limits"]["max_running_turns"] == 7
    assert shown["agents"]["claude"]["env"] == {"ANTHROPIC_API_KEY": "***"}
    assert "sk-secret" not in output


# SQLite-only: a corrupt store file.
def test_corrupt_store_is_a_clear_error_for_the_cli(tmp_path: Path) -> None:
    db = tmp_path / "cp.db"
    db.write_text("not a database")
    code, output = _run("--db", str(db), "status")
    assert code == 2 and "not an SQLite database" in output
    assert db.read_text() == "not a database"


def test_batch_runs_tasks_and_a_rerun_runs_nothing_again(tmp_path: Path, db: str) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": f"t{i}", "prompt": f"task {i}"}) + "\n" for i in range(3))
        + json.dumps({"id": "slow", "prompt": "#hang", "timeout": 1})
        + "\n"
    )
    agent = (
        f"{sys.executable} -m protocol.example_agent --invocations-file {tmp_path / 'inv.jsonl'}"
    )
    args = ["--db", db, "batch", str(tasks), "--agent", agent, "-j", "2"]
    code, _ = _run(*args)
    assert code == 1  # the timed-out task failed
    results = [json.loads(x) for x in (tmp_path / "tasks.results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in results] == ["ok", "ok", "ok", "timeout"]
    assert "timeout" in results[3]["error"]
    invocations = (tmp_path / "inv.jsonl").read_text().splitlines()
    code, _ = _run(*args)
    assert code == 1
    assert (tmp_path / "inv.jsonl").read_text().splitlines() == invocations  # nothing re-ran
    code, _output = _run(*args, "--retry-failed")
    assert code == 1  # it hangs again, but it was run again: one more invocation
    assert len((tmp_path / "inv.jsonl").read_text().splitlines()) == len(invocations) + 1


def test_batch_rerun_with_a_changed_prompt_is_a_clear_conflict(tmp_path: Path, db: str) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "a", "prompt": "first"}) + "\n")
    args = ["--db", db, "batch", str(tasks), "--agent", "example"]
    assert _run(*args)[0] == 0
    tasks.write_text(json.dumps({"id": "a", "prompt": "changed"}) + "\n")
    code, output = _run(*args)
    assert code == 2
    assert "idempotency key" in output and ":a" in output


# A kill loop (the batch killed again and again): in the full matrix; the default run keeps
# the rerun and the Ctrl-C tests.
HEAVY_MODULES = ["acp", "acp.schema", "sqlalchemy", "alembic", "mcp", "store", "control_plane.api"]

_PROBE = """
import json, runpy, sys
args, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
code = 0
if args:
    sys.argv = ["acpctl", *args]
    try:
        runpy.run_module("control_plane.cli", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code or 0
else:
    import control_plane.cli
import control_plane
loaded = [m for m in heavy if m in sys.modules]
print(json.dumps({"file": control_plane.__file__, "loaded": loaded, "code": code}))
"""


@pytest.mark.parametrize(
    "args",
    [
        [],  # `import control_plane.cli` alone
        ["--help"],
        ["sessions", "list", "--help"],
        ["batch", "--help"],
        ["gc", "--help"],
        ["search", "--help"],
        ["sessions", "import", "--help"],
        ["gc", "--older-than", "soon"],  # bad input: refused before the store is read
        ["no-such-command"],
        ["sessions", "list", "--limit", "0"],
        ["--db", "{tmp}/none.db", "sessions", "list"],  # no store: a usage error
        ["config", "show", "--json"],
    ],
)
def test_cli_start_up_does_not_import_the_runtime(tmp_path: Path, args: list[str]) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    report, output = _probe(tmp_path, argv, HEAVY_MODULES)
    assert Path(report["file"]) == Path(control_plane.__file__)  # this checkout's package
    assert report["loaded"] == [], output


# What serve loads before it answers ``initialize`` must not include what it may never use:
# PostgreSQL's dialect on a SQLite store, the transcript mapping (exports), the MCP server
# and uvicorn (loaded on a thread of their own when an agent first uses the subagent tools).
SERVE_LAZY = ["sqlalchemy.dialects.postgresql", "protocol.transcript.mapping", "mcp", "uvicorn"]


def test_serve_start_up_leaves_out_what_it_may_never_use(tmp_path: Path) -> None:
    probe = (
        "import json, sys\n"
        "import control_plane.serve.run\n"
        "print(json.dumps([m for m in json.loads(sys.argv[1]) if m in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(SERVE_LAZY)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []


def _probe(tmp_path: Path, argv: list[str], modules: list[str]) -> tuple[dict[str, Any], str]:
    """Run ``acpctl argv`` in a fresh interpreter (no user configuration); report which of
    ``modules`` it imported, its exit code and its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACPCTL_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path)  # no config file
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv), json.dumps(modules)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    return json.loads(result.stdout.splitlines()[-1]), result.stdout + result.stderr


# What the read commands must not import: they open the store alone, not the runtime.
RUNTIME_MODULES = ["acp", "acp.schema", "alembic", "mcp", "pykka", "aiosqlite", "control_plane.api"]


def test_read_commands_open_the_store_without_the_runtime(tmp_path: Path, db: str) -> None:
    from store import Store
    from tests.conftest import AGENT

    with Store.open(db) as store:
        sid = store.spawn(AGENT, str(tmp_path), None, None, "s").session.id
    for args in (
        ["sessions", "list"],
        ["sessions", "show", sid],
        ["sessions", "tree"],
        ["sessions", "export", sid, "-o", str(tmp_path / "t.jsonl")],
        ["events", sid],
        ["status", "--json"],
    ):
        report, output = _probe(tmp_path, ["--db", db, *args], RUNTIME_MODULES)
        assert report["code"] == 0, (args, output)
        assert report["loaded"] == [], (args, output)
    assert (tmp_path / "t.jsonl").exists()


def test_db_and_config_are_accepted_after_the_subcommand_too(tmp_path: Path, db: str) -> None:
    from store import Store

    Store.open(db).close()
    cfg = tmp_path / "c.toml"
    cfg.write_text('queue_mode = "steer"\n')
    code, output = _run("sessions", "list", "--json", "--db", db)
    assert code == 0 and json.loads(output)["sessions"] == []
    code, output = _run("config", "show", "--json", f"--config={cfg}", "--db", db)
    assert code == 0
    shown = json.loads(output)
    assert shown["db"] == db and shown["queue_mode"] == "steer"
    # After "--" nothing moves: it stays the command's own argument.
    from control_plane.cli import hoist_global_options

    assert hoist_global_options(["batch", "t", "--", "--db", "x"]) == [
        "batch",
        "t",
        "--",
        "--db",
        "x",
    ]


def test_a_db_url_that_is_not_a_sqlite_file_is_refused_and_creates_nothing(
    tmp_path: Path,
) -> None:
    for how in (["--db", "mysql://u@localhost/acpctl"], []):
        env = {**os.environ, "ACPCTL_DB": "mysql://u@localhost/acpctl"} if not how else None
        run = subprocess.run(
            [sys.executable, "-m", "control_plane.cli", *how, "status"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=60,
        )
        assert run.returncode == 2, run.stderr
        assert "mysql:// stores are not supported" in run.stderr
        assert "postgresql://USER@HOST:PORT/DATABASE" in run.stderr  # says what works
    # A PostgreSQL URL is taken; a server that is not there is named, with no password.
    url = "postgresql://u:s3cret@127.0.0.1:9/x"
    run = subprocess.run(
        [sys.executable, "-m", "control_plane.cli", "--db", url, "status"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    assert "cannot open store postgresql://u:***@127.0.0.1:9/x" in run.stderr
    assert "s3cret" not in run.stderr
    assert list(tmp_path.iterdir()) == []  # no directory named "mysql:" appeared
