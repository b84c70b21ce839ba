"""Interoperability with clients nobody here wrote: the TypeScript ACP SDK's experimental
WebSocket and Streamable HTTP clients (``@agentclientprotocol/sdk`` 2.4.0, pinned in
``tests/remote/ts_client``) complete a turn with a permission request against
``serve --listen``; the DELETE they send on close detaches and ends nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.remote_client import ListenServer, ws_client

CLIENT_DIR = Path(__file__).parent / "ts_client"
# Node.js and the TypeScript SDK: in the full matrix (pytest -m full), beside the real agents.
pytestmark = pytest.mark.full

INSTALL = "install Node.js 18+ and run: npm ci --prefix tests/remote/ts_client"


def _skip_reason() -> str | None:
    if shutil.which("node") is None:
        reason = f"Node.js is not installed ({INSTALL})"
    elif not (CLIENT_DIR / "node_modules" / "@agentclientprotocol" / "sdk").is_dir():
        reason = f"the TypeScript SDK is not installed ({INSTALL})"
    else:
        return None
    if os.environ.get("ACPCTL_REAL_AGENTS") == "required":  # CI: never skipped
        raise RuntimeError(f"ACPCTL_REAL_AGENTS=required, but {reason}")
    return reason


@pytest.fixture
def node_client() -> Path:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    return CLIENT_DIR / "turn.mjs"


@pytest.mark.parametrize("transport", ["ws", "http"])
@pytest.mark.anyio
async def test_the_typescript_sdk_client_completes_a_turn_with_a_permission_request(
    server: ListenServer, node_client: Path, tmp_path: Path, transport: str
) -> None:
    secret = server.secret
    run = subprocess.run(
        ["node", str(node_client), server.url, secret, transport, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["loadSession"] is True
    assert seen["stopReason"] == "end_turn"
    assert seen["permissions"] == 1
    assert seen["text"] == "Echo: hello from node permission: allowed"
    positions = seen["positions"]
    assert positions and positions == sorted(set(positions))
    # The client sent DELETE when it closed: the session lives on, durable, for anyone.
    async with ws_client(server.ws_url, secret) as client:
        await client.initialize()
        await client.load(seen["sessionId"], str(tmp_path))
        assert (await client.prompt(seen["sessionId"], "later"))["stopReason"] == "end_turn"
        assert client.text(seen["sessionId"]).endswith("Echo: later")


@pytest.mark.parametrize("transport", ["ws", "http"])
@pytest.mark.anyio
async def test_the_typescript_sdk_client_forks_a_session(
    server: ListenServer, node_client: Path, tmp_path: Path, transport: str
) -> None:
    """``session/fork`` from the TypeScript SDK's client: the fork answers with what it is
    (``_meta.acpctl``), and its first turn knows the conversation it was forked from."""
    run = subprocess.run(
        ["node", str(node_client.parent / "fork.mjs"), server.url, server.secret, transport,
         str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=90,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["forkAdvertised"] is True
    assert seen["forkId"] != seen["sessionId"] and seen["stopReason"] == "end_turn"
    meta = seen["forkMeta"]
    assert meta["forkOf"] == {"session": seen["sessionId"], "turn": 1}
    assert isinstance(meta["position"], int)
    assert "apples" in seen["forkText"], seen  # seeded: the example agent here has no fork
