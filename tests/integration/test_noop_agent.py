"""The tiny stdlib agent that tests use when a turn only has to run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from control_plane import CommandState, SessionState
from protocol.example_agent import noop
from tests.conftest import eventually
from tests.support.cp_harness import noop_agent, open_cp


def test_a_turn_echoes_and_reports_usage(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        spawned = cp.spawn(noop_agent(), tmp_path, "hello there")
        assert spawned.command is not None
        outcome = cp.wait(spawned.command.id, 30)
        assert outcome.ok and outcome.text == "Echo: hello there"
        assert outcome.usage == {"inputTokens": 2, "outputTokens": 1, "totalTokens": 3}
        second = cp.wait(cp.prompt(spawned.session.id, "again").id, 30)
        assert second.text == "Echo: again"


def test_hang_waits_for_the_cancel_and_ends_cancelled(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        spawned = cp.spawn(noop_agent(), tmp_path, "#hang")
        assert spawned.command is not None
        sid = spawned.session.id
        eventually(lambda: cp.get(sid).state is SessionState.RUNNING)
        cp.cancel(sid)
        outcome = cp.wait(spawned.command.id, 30)
        assert outcome.state is CommandState.CANCELLED and outcome.stop_reason == "cancelled"
        assert cp.wait(cp.prompt(sid, "still here").id, 30).text == "Echo: still here"


def test_it_imports_nothing_beyond_the_standard_library() -> None:
    probe = (
        "import runpy, sys; sys.argv = ['noop']; sys.stdin = open('/dev/null'); "
        f"runpy.run_path({noop.__file__!r}, run_name='__main__'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'acp', 'pydantic', 'protocol', 'sqlalchemy'}))"
    )
    found = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, check=True
    )
    assert found.stdout.strip() == "[]"
    assert noop.command()[1:3] == ("-I", "-S")


def test_unknown_requests_get_method_not_found() -> None:
    request = '{"jsonrpc":"2.0","id":7,"method":"session/load","params":{}}\n'
    answer = subprocess.run(noop.command(), input=request, capture_output=True, text=True)
    assert answer.returncode == 0
    assert '"code":-32601' in answer.stdout and '"id":7' in answer.stdout
