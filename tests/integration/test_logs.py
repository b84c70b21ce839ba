"""Logs: JSON lines with the session they concern, and no secret in any log line, stored
byte or export (an agent that prints its own key to stderr, say)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from actors import log_context
from control_plane.logs import JsonFormatter, SecretRedactor
from store import Store
from tests.support.direct_sql import is_postgres
from tests.support.store_contents import stored_bytes

SECRET = "s3cret-token-value-42"
LEAKY = (
    "import os, sys; print('token is', os.environ['TOKEN'], file=sys.stderr); "
    "print('again', os.environ['TOKEN'], file=sys.stderr); sys.exit(3)"
)


def _record(message: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = None if exc is None else (type(exc), exc, exc.__traceback__)
    return logging.LogRecord("t", logging.WARNING, __file__, 1, message, args, exc_info)


def test_a_json_line_names_the_session_and_command_its_thread_works_for() -> None:
    formatter = JsonFormatter("host:1:2")
    lines: list[dict[str, object]] = []

    def actor_thread() -> None:
        log_context.bind("sess-1", "cmd-1")
        lines.append(json.loads(formatter.format(_record("turn %s", "began"))))

    thread = threading.Thread(target=actor_thread, name="SessionActor-9")
    thread.start()
    thread.join()
    line = lines[0]
    assert line["message"] == "turn began" and line["level"] == "warning"
    assert (line["session"], line["command"], line["node"]) == ("sess-1", "cmd-1", "host:1:2")
    assert line["thread"] == "SessionActor-9" and str(line["ts"]).endswith("+00:00")
    other = json.loads(formatter.format(_record("no session here")))  # this thread bound none
    assert "session" not in other and "command" not in other


def test_secrets_are_replaced_in_messages_arguments_and_tracebacks() -> None:
    redactor = SecretRedactor([SECRET, "short"])  # too short to be worth replacing
    try:
        raise RuntimeError(f"the agent said {SECRET}")
    except RuntimeError as exc:
        record = _record("key=%s and short", SECRET, exc=exc)
    assert redactor.filter(record)
    text = JsonFormatter("n").format(record)
    assert SECRET not in text
    assert "key=*** and short" in text and "the agent said ***" in text


def test_an_agent_that_prints_its_key_leaks_it_nowhere_we_keep(
    tmp_path: Path, db: str, data_home: Path
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        "[agents.leaky]\n"
        f"command = {json.dumps([sys.executable, '-c', LEAKY])}\n"
        f'env = {{ TOKEN = "{SECRET}" }}\n'
    )
    tasks = tmp_path / "t.jsonl"
    tasks.write_text('{"id": "a", "prompt": "hi"}\n')
    argv = [sys.executable, "-m", "control_plane.cli", "--config", str(config), "--db", db]
    run = subprocess.run(
        [*argv, "--log-format", "json", "batch", str(tasks), "--agent", "leaky"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ACPCTL_CONFIG": str(config)},
        cwd=tmp_path,
    )
    assert run.returncode == 1, run.stderr[-2000:]
    logged = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    with Store.open(db) as store:
        (session,) = store.list_sessions()
        stored = [e.payload for e in store.events(session.id)]
    failed = [line for line in logged if "did not start" in str(line["message"])]
    assert failed and failed[0]["session"] == session.id and failed[0]["level"] == "warning"
    assert any("token is ***" in str(p) for p in stored)  # the stderr tail, redacted
    export = subprocess.run(
        [*argv, "sessions", "export", session.id, "-o", str(tmp_path / "x.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert export.returncode == 0, export.stderr
    kept = [run.stdout, run.stderr, (tmp_path / "x.jsonl").read_text()]
    kept.append(stored_bytes(db).decode("latin-1"))
    assert all(SECRET not in text for text in kept)
    # The agent's own stderr log is the agent's output, written by it: not scrubbed.
    # Beside a store file; with PostgreSQL, in this machine's data directory.
    logs = data_home / "acpctl" / "agent-logs" if is_postgres(db) else tmp_path / "agent-logs"
    (agent_log,) = logs.glob("*.stderr.log")
    assert SECRET in agent_log.read_text()


@pytest.mark.parametrize("value", ["xml", ""])
def test_a_bad_log_format_is_refused(tmp_path: Path, value: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "control_plane.cli", "--log-format", value, "status"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "log-format" in run.stderr
