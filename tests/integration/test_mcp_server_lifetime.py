"""The subagent MCP server ends with the control plane whose bridge it serves, even when the
agent that started it leaves it behind."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.mark.timeout(60)
def test_the_mcp_server_exits_when_its_bridge_closes(tmp_path: Path) -> None:
    path = str(tmp_path / "bridge.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "control_plane.subagents.mcp_server",
            "--socket",
            path,
            "--session",
            "s",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    try:
        listener.settimeout(30)
        held, _ = listener.accept()  # the server holds a connection to the bridge ...
        time.sleep(0.5)
        assert proc.poll() is None  # ... and serves while the bridge is there
        held.close()  # the control plane is gone
        listener.close()
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_mcp_server_refuses_to_start_without_a_bridge(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "control_plane.subagents.mcp_server",
            "--socket",
            str(tmp_path / "none.sock"),
            "--session",
            "s",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "bridge" in done.stderr
