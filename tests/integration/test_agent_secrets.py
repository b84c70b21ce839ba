"""Secrets configured for an agent never enter the store: names are kept, values are read from
the configuration at each launch (so a rotated key reaches an existing session)."""

from __future__ import annotations

import json
import logging
import shlex
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from actors.agent_profiles import AgentProfile, AgentProfiles
from control_plane import ControlPlane
from control_plane.config import load_config
from store import AgentSpec, Store
from tests.support.cp_harness import FAST
from tests.support.store_contents import stored_bytes

SECRET = "sk-test-SECRET-value-7f3a9c"
ROTATED = "sk-test-ROTATED-value-2b8e41"
GOLDEN = Path(__file__).parent.parent / "golden" / "store-0004-agent-secrets.db"
GOLDEN_SECRET = "sk-ant-OLDRELEASE-SECRET-0123456789"  # what the previous release stored


def _env_probe_agent(tmp: Path) -> AgentSpec:
    """The example agent, started through a shell that first appends the key it was given
    to a file: what a launch really put in the agent's environment."""
    seen = tmp / "seen-keys.txt"
    agent = shlex.join(
        [sys.executable, "-m", "protocol.example_agent", "--state-file", str(tmp / "st.json")]
    )
    script = f'printf "%s\\n" "$PROBE_API_KEY" >> {shlex.quote(str(seen))}; exec {agent}'
    return AgentSpec("probe", ("sh", "-c", script), env=(("PROBE_API_KEY", SECRET),))


def _open(tmp: Path, db: str, profiles: AgentProfiles | None = None) -> ControlPlane:
    settings = replace(FAST, log_dir=str(tmp / "logs"))
    if profiles is not None:
        settings = replace(settings, agent_profiles=profiles)
    return ControlPlane.open(db, settings=settings)


def _acpctl(db: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "control_plane.cli", "--db", db, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout + done.stderr


@pytest.mark.timeout(90)
def test_a_configured_secret_appears_in_no_stored_byte_export_or_cli_output(
    tmp_path: Path, db: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    spec = _env_probe_agent(tmp_path)
    assert SECRET not in repr(spec)
    with _open(tmp_path, db) as cp:
        spawned = cp.spawn(spec, tmp_path, "hello", idempotency_key="k")
        assert spawned.command is not None
        assert cp.wait(spawned.command.id, 60).state.value == "completed"
        assert cp.get(spawned.session.id).agent.env_names == ("PROBE_API_KEY",)
        cp.export_jsonl(spawned.session.id, tmp_path / "export.jsonl")
        sid = spawned.session.id
    # The agent did get the value ...
    assert (tmp_path / "seen-keys.txt").read_text().split() == [SECRET]
    # ... and nothing kept it (SQLite: no byte of the file; PostgreSQL: no row of a table).
    assert SECRET.encode() not in stored_bytes(db)
    assert SECRET not in (tmp_path / "export.jsonl").read_text()
    for args in (("events", sid, "--json"), ("sessions", "show", sid, "--json")):
        out = _acpctl(db, *args)
        assert "PROBE_API_KEY" in out or args[0] == "events"
        assert SECRET not in out
    assert SECRET not in caplog.text
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "logs").glob("*"))
    assert SECRET not in logs


@pytest.mark.timeout(90)
def test_a_rotated_key_in_the_configuration_reaches_the_next_launch_of_a_session(
    tmp_path: Path, db: str
) -> None:
    spec = _env_probe_agent(tmp_path)
    stored = AgentSpec(spec.name, spec.command, env_names=spec.env_names)  # no values
    first = AgentProfiles({"probe": AgentProfile(env={"PROBE_API_KEY": SECRET})})
    with _open(tmp_path, db, first) as cp:
        spawned = cp.spawn(stored, tmp_path, "one", idempotency_key="k")
        assert spawned.command is not None
        cp.wait(spawned.command.id, 60)
    rotated = AgentProfiles({"probe": AgentProfile(env={"PROBE_API_KEY": ROTATED})})
    with _open(tmp_path, db, rotated) as cp:
        again = cp.prompt(spawned.session.id, "two")  # a new process: the agent relaunches
        assert cp.wait(again.id, 60).state.value == "completed"
    assert (tmp_path / "seen-keys.txt").read_text().split() == [SECRET, ROTATED]
    assert ROTATED.encode() not in stored_bytes(db)


def test_config_values_become_a_launch_profile_and_the_spec_keeps_names(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[agents.claude]\ncommand = "claude-agent-acp"\n'
        f'env = {{ ANTHROPIC_API_KEY = "{SECRET}" }}\npassthrough = ["HOST_TOKEN"]\nfs = false\n'
    )
    config = load_config(str(cfg), environ={})
    spec, _ = config.agent("claude")
    assert spec.env_names == ("ANTHROPIC_API_KEY",)
    assert SECRET not in json.dumps(spec.to_json()) and SECRET not in repr(spec)
    profile = config.runtime_settings().agent_profiles.get("claude")
    assert profile.env == {"ANTHROPIC_API_KEY": SECRET}
    assert profile.passthrough == ("HOST_TOKEN",) and profile.fs is False
    assert SECRET not in repr(config)


# SQLite-only: the golden store of the previous release is a SQLite file.
@pytest.mark.timeout(60)
def test_a_store_written_by_the_previous_release_is_scrubbed_and_keeps_its_spawn_keys(
    tmp_path: Path,
) -> None:
    db = tmp_path / "old.db"
    shutil.copy(GOLDEN, db)
    assert GOLDEN_SECRET.encode() in db.read_bytes()  # as the previous release left it
    with Store.open(db) as store:
        (session,) = store.list_sessions()
        assert session.agent.env_names == ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")
        created = [e for e in store.events(session.id) if e.kind == "session_created"]
        assert created[0].payload["agent"]["envNames"] == list(session.agent.env_names)
        # The spawn the previous release recorded, repeated with the same key and the same
        # values: the same session, not an IdempotencyConflict.
        again = store.spawn(
            AgentSpec(
                "claude",
                session.agent.command,
                env=(
                    ("ANTHROPIC_API_KEY", GOLDEN_SECRET),
                    ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
                ),
            ),
            "/tmp",
            None,
            [{"type": "text", "text": "hello"}],
            "task-1",
        )
        assert again.session.id == session.id and not again.created
    assert GOLDEN_SECRET.encode() not in stored_bytes(db)
    with sqlite3.connect(db) as conn:
        (agent,) = conn.execute("SELECT agent FROM sessions").fetchone()
    assert "env" not in json.loads(agent)
