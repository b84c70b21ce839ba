"""A control plane killed (kill -9) while a webhook POST is in flight, then started again:
every event id arrives, in order, and nothing the receiver acknowledged is sent again
except the one notification that was in flight at the kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.support.webhook_receiver import OK, Reply, receiving

SECRET = "kill-test-secret"
TURNS = 8


def _driver(tmp_path: Path, url: str, db: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACPCTL_")}
    env |= {"HOOK_SECRET": SECRET, "XDG_CONFIG_HOME": str(tmp_path / "no-config")}
    argv = [sys.executable, "-m", "tests.support.notify_driver", str(tmp_path), url, str(TURNS)]
    return subprocess.Popen(
        [*argv, db], env=env, stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )


def _ended(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("ended "), line
    return line.split()[1].split(",")


@pytest.mark.full
@pytest.mark.parametrize("answer_after_kill", [True, False])
def test_kill9_mid_delivery_resends_only_what_was_not_acknowledged(
    tmp_path: Path, db: str, answer_after_kill: bool
) -> None:
    """The fourth POST is held at the receiver; the control plane is killed while it waits.
    ``answer_after_kill``: the receiver then answers it 200 anyway (acknowledged, but the
    dead sender never moved its checkpoint: it comes once more); else it is dropped."""
    with receiving(SECRET) as receiver:
        receiver.hold()
        receiver.script = lambda _r, n: (
            Reply(hold=True, drop=not answer_after_kill) if n == 4 else OK
        )
        first = _driver(tmp_path, receiver.url, db)
        try:
            expected = _ended(first)
            assert receiver.wait_for(lambda r: r.held == 1, 30)
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        finally:
            first.kill()
        in_flight = receiver.requests[3].key
        receiver.script = lambda _r, _n: OK
        receiver.release()
        second = _driver(tmp_path, receiver.url, db)
        try:
            assert _ended(second) == expected  # no new turns: the same ids
            assert receiver.wait_for(lambda r: set(expected) <= set(r.acked_keys()), 30)
        finally:
            second.send_signal(signal.SIGKILL)
            second.wait(10)
    acked = receiver.acked_keys()
    assert sorted(set(acked), key=int) == expected
    twice = {key for key, n in Counter(acked).items() if n > 1}
    assert twice <= {in_flight}, f"acknowledged twice: {twice}"
    sent = [r.key for r in receiver.requests]
    assert sent == sorted(sent, key=int), "out of order"
    assert all(r.signature_ok for r in receiver.requests)
