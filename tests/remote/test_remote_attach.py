"""``acpctl attach`` as a person uses it: a subprocess whose stdin is the keyboard. It
follows a session live, sends prompts, answers a permission request, and after the server
is killed and started again it reconnects by itself and shows the rest once."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.remote_client import ListenServer, ws_client

pytestmark = pytest.mark.anyio


class AttachProcess:
    def __init__(self, server: ListenServer, session_id: str) -> None:
        env = {**os.environ, "ACPCTL_TOKEN": server.secret}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "control_plane.cli", "attach", server.ws_url, session_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.output = ""
        os.set_blocking(self.proc.stdout.fileno(), False)  # type: ignore[union-attr]

    def type(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def read(self) -> str:
        assert self.proc.stdout is not None
        chunk = self.proc.stdout.read()
        if chunk:
            self.output += chunk.decode(errors="replace")
        return self.output

    async def wait_for(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.read(), re.S)
            if found:
                return found
            await asyncio.sleep(0.05)
        raise AssertionError(f"{pattern!r} not in attach's output: {self.output!r}")

    def stop(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(60)
        self.read()
        return code


async def test_attach_prompts_and_answers_a_permission_request(
    server: ListenServer, tmp_path: Path
) -> None:
    async with ws_client(server.ws_url, server.secret) as owner:
        await owner.initialize()
        sid = await owner.new_session(str(tmp_path))
        await owner.prompt(sid, "earlier turn")
    attach = AttachProcess(server, sid)
    try:
        await attach.wait_for(r"Echo: earlier turn")  # the conversation so far
        attach.type("#permission #tool please")
        menu = await attach.wait_for(r"\[permission\].*?(\d+)\. [^\n]*\(allow_once\)")
        attach.type(menu.group(1))
        await attach.wait_for(r"permission: allowed\s*\[end_turn\]")
    finally:
        code = attach.stop()
    assert code == 0, attach.proc.stderr.read() if attach.proc.stderr else ""
    assert attach.output.count("Echo: earlier turn") == 1


async def test_attach_reconnects_after_the_server_restarts_and_shows_the_rest_once(
    server: ListenServer, tmp_path: Path
) -> None:
    secret = server.secret
    async with ws_client(server.ws_url, secret) as owner:
        await owner.initialize()
        sid = await owner.new_session(str(tmp_path))
        attach = AttachProcess(server, sid)
        try:
            await asyncio.sleep(1)
            turn = asyncio.create_task(owner.prompt(sid, "#chunks=100 #delay=30 go"))
            await attach.wait_for(r"c10 ")
            server.kill9()
            with pytest.raises(ConnectionError):
                await turn
            server.start()
            # Reconnected by itself: the interrupted turn's marker arrives, nothing twice.
            await attach.wait_for(r"interrupted by a restart", timeout=90)
            async with ws_client(server.ws_url, secret) as again:
                await again.initialize()
                await again.load(sid, str(tmp_path))
                await again.prompt(sid, "after the restart")
            await attach.wait_for(r"Echo: after the restart")
        finally:
            attach.stop()
    chunks = re.findall(r"c(\d+) ", attach.output)
    assert [int(c) for c in chunks] == list(range(len(chunks))), "no gap, no repeat"
    assert attach.output.count("Echo: after the restart") == 1
