"""The console's views on the server (control_plane/remote/console_workspace.py,
console_permissions.py, console_api.py): a turn's workspace diff, a permission request as
recorded, the subagent tree nested; and a clear 4xx for each bad request, against a real
``serve --listen``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from store.tokens import TokenAccess, TokenSessions
from tests.conftest import eventually
from tests.support.cp_harness import example_agent, open_cp
from tests.support.remote_client import make_token, running_server, ws_client


def _get(port: int, secret: str | None, path: str) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def git_repo(path: Path) -> Path:
    path.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True)

    git("init", "-q")
    (path / "a.txt").write_text("one\ntwo\nthree\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return path


@pytest.mark.timeout(180)
def test_a_turns_diff_the_subagent_tree_and_their_refusals(tmp_path: Path, db: str) -> None:
    repo = git_repo(tmp_path / "repo")
    agent = example_agent(tmp_path)
    with open_cp(tmp_path, db=db) as cp:
        spawned = cp.spawn(agent, repo, r"#edit=a.txt:one\nTWO\nthree\n go", workspace="worktree")
        assert spawned.command is not None and cp.wait(spawned.command.id, 60).ok
        sid, seq = spawned.session.id, spawned.command.seq
        plain = cp.spawn(agent, tmp_path).session.id
        child = cp.spawn(agent, tmp_path, parent=plain, announce=False).session.id
        grandchild = cp.spawn(agent, tmp_path, parent=child, announce=False).session.id
        # The checkpoint is written just after the turn's end.
        eventually(lambda: bool(cp.events_of_kinds(sid, ("checkpoint",))))
    own = make_token(db, "own-only", TokenAccess.CONTROL, TokenSessions.OWN)
    with running_server(tmp_path, token_name="console-views", db=db) as server:
        port, secret = server.port, server.secret
        status, found = _get(port, secret, f"/api/sessions/{sid}/workspace")
        assert status == 200 and [t["seq"] for t in found["turns"]] == [seq], found
        assert found["workspace"]["branch"].startswith("acpctl/")
        status, diff = _get(port, secret, f"/api/sessions/{sid}/turns/{seq}/diff")
        assert status == 200 and "-two\n+TWO\n" in diff["diff"] and not diff["truncated"]
        assert diff["ref"] == f"refs/acpctl/{sid}/{seq}"

        status, tree = _get(port, secret, f"/api/sessions/{plain}")
        assert status == 200 and not tree["hasWorkspace"] and not tree["treeTruncated"]
        assert [c["id"] for c in tree["children"]] == [child]
        assert [g["id"] for g in tree["children"][0]["children"]] == [grandchild]
        assert _get(port, secret, f"/api/sessions/{plain}/workspace") == (
            200,
            {"workspace": None, "turns": []},
        )

        for path, code, says in (
            (f"/api/sessions/{sid}/turns/abc/diff", 400, "not 'abc'"),
            (f"/api/sessions/{sid}/turns/{seq + 5}/diff", 404, f"turns: {seq}"),
            (f"/api/sessions/{plain}/turns/1/diff", 404, "has no workspace"),
            ("/api/sessions/nope/turns/1/diff", 404, "no such session"),
            ("/api/sessions/nope/workspace", 404, "no such session"),
            (f"/api/sessions/{sid}/permissions/acpctl-permission-none", 404, "no permission"),
            (f"/api/sessions/{sid}/permissions/{'x' * 300}", 400, "too long"),
            ("/api/sessions/nope/permissions/x", 404, "no such session"),
        ):
            status, refused = _get(port, secret, path)
            assert status == code and says in refused["error"], (path, refused)
        for path in (
            f"/api/sessions/{sid}/turns/{seq}/diff",
            f"/api/sessions/{sid}/workspace",
            f"/api/sessions/{sid}/permissions/x",
        ):
            assert _get(port, None, path)[0] == 401
            assert _get(port, own, path)[0] == 403  # an own token: not its session


@pytest.mark.timeout(180)
def test_a_permission_request_reads_back_pending_then_answered_by_its_token(
    tmp_path: Path, db: str
) -> None:
    """The JSON-RPC id a client is asked with is the store's request id: the console's deep
    link (``#/s/<session>?permission=<id>``) is matched against it."""

    async def run() -> None:
        with running_server(tmp_path, token_name="the-phone", db=db) as server:
            async with ws_client(server.ws_url, server.secret, permission="ignore") as client:
                await client.initialize()
                sid = await client.new_session(str(tmp_path))
                turn = asyncio.create_task(client.prompt(sid, "#permission #tool deep link"))
                await client.wait_for(lambda: bool(client.permission_requests))
                request_id = client.permission_requests[0]["id"]
                path = f"/api/sessions/{sid}/permissions/{urllib.parse.quote(request_id)}"
                status, pending = await asyncio.to_thread(_get, server.port, server.secret, path)
                assert status == 200 and pending["state"] == "pending", pending
                assert pending["toolCallId"] and pending["decidedBy"] is None
                await client.answer_permission(client.permission_requests[0], "allow")
                assert (await turn)["stopReason"] == "end_turn"
                status, answered = await asyncio.to_thread(_get, server.port, server.secret, path)
                assert status == 200 and answered["state"] == "answered"
                assert (answered["optionId"], answered["decidedBy"]) == ("allow", "the-phone")
                assert answered["decidedAt"] is not None

    asyncio.run(run())
