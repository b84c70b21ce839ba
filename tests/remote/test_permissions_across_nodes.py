"""A permission request asked on one node, answered on another: two ``serve --listen``
processes on one store (a real PostgreSQL database, or one SQLite file), real sockets.

The session runs on node A (its client created it there); the client that asked goes away;
the answer comes from node B's console API or from an ACP client attached to B. The agent
gets it and the turn goes on; of answers given at once on both nodes exactly one wins and
the others are told "already answered" (409 for the console, ``$/cancel_request`` with
``_meta.acpctl.reason`` for ACP clients)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.support.direct_sql import query
from tests.support.remote_client import ListenServer, RpcClient, make_token, ws_client

# SQLite has no notifications: another process's request and answer arrive by the re-read
# (control_plane/remote/permissions.py, 1 s there); PostgreSQL's come at once. The bound
# leaves room for a 2-core machine running other tests beside this one.
ARRIVES_WITHIN_S = 20.0


@contextlib.contextmanager
def two_nodes(tmp_path: Path, db: str) -> Iterator[tuple[ListenServer, ListenServer, str]]:
    secret = make_token(db, "node-tests")
    nodes = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            nodes.append(ListenServer(tmp_path / name, db=db).start())
        yield nodes[0], nodes[1], secret
    finally:
        for node in nodes:
            node.stop()


def _http(
    port: int, secret: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {secret}"}
    data = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data, headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _permission_path(sid: str, request_id: str) -> str:
    return f"/api/sessions/{sid}/permissions/{urllib.parse.quote(request_id)}"


def _withdrawn(client: RpcClient, request_id: str) -> bool:
    return request_id in client.withdrawn


def _turn_state(db: str, sid: str) -> str | None:
    rows = query(db, "SELECT state FROM commands WHERE session_id = ? ORDER BY seq", (sid,))
    return str(rows[-1][0]) if rows else None


def _said(db: str, sid: str, text: str) -> bool:
    """The agent's reply, its chunks joined, has ``text``."""
    rows = query(
        db,
        "SELECT payload FROM events WHERE session_id = ? AND kind = 'session_update' ORDER BY seq",
        (sid,),
    )
    updates = [json.loads(r[0])["params"]["update"] for r in rows]
    reply = "".join(
        u["content"].get("text", "")
        for u in updates
        if u.get("sessionUpdate") == "agent_message_chunk"
    )
    return text in reply


async def _until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.1)


@pytest.mark.backend_specific  # notifications (PostgreSQL), the re-read (SQLite)
@pytest.mark.timeout(240)
def test_the_asking_client_gone_the_other_nodes_console_answers(tmp_path: Path, db: str) -> None:
    async def run() -> None:
        with two_nodes(tmp_path, db) as (a, b, secret):
            async with ws_client(a.ws_url, secret, permission="ignore") as asker:
                await asker.initialize()
                sid = await asker.new_session(str(tmp_path))
                turn = asyncio.create_task(asker.prompt(sid, "#permission #tool across"))
                await asker.wait_for(lambda: bool(asker.permission_requests))
                request = asker.permission_requests[0]
            # The client that asked is gone (its prompt's answer with it); the turn waits.
            turn.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await turn
            request_id = request["id"]
            path = _permission_path(sid, request_id)
            status, pending = await asyncio.to_thread(_http, b.port, secret, path)
            assert status == 200 and pending["state"] == "pending", pending
            assert _turn_state(db, sid) == "running"
            # B's console answers a request B never asked: the store decides, A hears.
            answered_at = time.monotonic()
            status, record = await asyncio.to_thread(
                _http, b.port, secret, path, {"optionId": "allow"}
            )
            assert status == 200, record
            assert (record["state"], record["optionId"]) == ("answered", "allow")
            assert record["decidedBy"] == "node-tests"
            await _until(lambda: _turn_state(db, sid) == "completed", ARRIVES_WITHIN_S, "turn")
            print(f"the answer reached node A in {time.monotonic() - answered_at:.2f} s")
            assert _said(db, sid, "permission: allowed")
            # A second answer, late: typed "already answered", nothing changes.
            status, late = await asyncio.to_thread(
                _http, b.port, secret, path, {"optionId": "reject"}
            )
            assert status == 409 and late["code"] == "already_answered", late
            assert (late["state"], late["optionId"]) == ("answered", "allow")
            kinds = query(
                db,
                "SELECT kind, payload FROM events WHERE session_id = ?"
                " AND kind IN ('permission_requested', 'permission_settled') ORDER BY seq",
                (sid,),
            )
            assert [k for k, _ in kinds] == ["permission_requested", "permission_settled"]
            requested, settled = (json.loads(p) for _, p in kinds)
            assert requested["toolCall"]["toolCallId"] == requested["toolCallId"]
            assert [o["optionId"] for o in requested["options"]] == ["allow", "reject"]
            assert settled == {
                "requestId": request_id,
                "state": "answered",
                "optionId": "allow",
                "decidedBy": "node-tests",
            }

    asyncio.run(run())


@pytest.mark.full
@pytest.mark.timeout(240)
def test_answers_at_once_on_two_nodes_one_wins_the_others_are_told(tmp_path: Path, db: str) -> None:
    """An ACP client on A, one on B (it follows the session there: B puts A's request to it
    with the same id) and B's console answer at once: one wins; every other answerer hears
    "already answered"; the clients that did not win are withdrawn on both nodes."""

    async def run() -> None:
        with two_nodes(tmp_path, db) as (a, b, secret):
            async with (
                ws_client(a.ws_url, secret, permission="ignore") as on_a,
                ws_client(b.ws_url, secret, permission="ignore") as on_b,
            ):
                await on_a.initialize()
                await on_b.initialize()
                sid = await on_a.new_session(str(tmp_path))
                await on_b.load(sid, str(tmp_path))
                turn = asyncio.create_task(on_a.prompt(sid, "#permission #tool race"))
                await on_a.wait_for(lambda: bool(on_a.permission_requests))
                await on_b.wait_for(lambda: bool(on_b.permission_requests), ARRIVES_WITHIN_S)
                request_id = on_a.permission_requests[0]["id"]
                assert on_b.permission_requests[0]["id"] == request_id
                assert (
                    on_b.permission_requests[0]["params"] == (on_a.permission_requests[0]["params"])
                )
                path = _permission_path(sid, request_id)
                console = asyncio.to_thread(_http, b.port, secret, path, {"outcome": "cancelled"})
                _, _, (status, body) = await asyncio.gather(
                    on_a.answer_permission(on_a.permission_requests[0], "allow"),
                    on_b.answer_permission(on_b.permission_requests[0], "reject"),
                    console,
                )
                assert (await turn)["stopReason"] == "end_turn"
                ((state, option, by),) = query(
                    db,
                    "SELECT state, option_id, decided_by FROM permission_requests WHERE id = ?",
                    (request_id,),
                )
                assert state == "answered"
                # The winner is not withdrawn; every other answerer is, told why.
                clients = {"allow": on_a, "reject": on_b}
                winner = clients.get(option)
                for client in clients.values():
                    if client is winner:
                        assert request_id not in client.withdrawn
                    else:
                        await client.wait_for(
                            partial(_withdrawn, client, request_id), ARRIVES_WITHIN_S
                        )
                if option is None:  # the console won
                    assert status == 200 and body["optionId"] is None
                else:
                    assert status == 409 and body["code"] == "already_answered", body
                    assert body["optionId"] == option
                    loser = on_b if winner is on_a else on_a
                    reasons = [c.get("_meta", {}).get("acpctl", {}) for c in loser.cancels]
                    assert reasons, "the losing client was told"
                expected = {"allow": "allowed", "reject": "rejected", None: "cancelled"}[option]
                assert _said(db, sid, f"permission: {expected}")
                print(f"won by {by} with {option!r}")

    asyncio.run(run())


@pytest.mark.full
@pytest.mark.timeout(240)
def test_a_request_withdrawn_on_its_node_is_withdrawn_on_the_other(tmp_path: Path, db: str) -> None:
    """The turn is cancelled on A while B's client holds the request: B withdraws it."""

    async def run() -> None:
        with two_nodes(tmp_path, db) as (a, b, secret):
            async with (
                ws_client(a.ws_url, secret, permission="ignore") as on_a,
                ws_client(b.ws_url, secret, permission="ignore") as on_b,
            ):
                await on_a.initialize()
                await on_b.initialize()
                sid = await on_a.new_session(str(tmp_path))
                await on_b.load(sid, str(tmp_path))
                turn = asyncio.create_task(on_a.prompt(sid, "#permission #tool cancelled"))
                await on_b.wait_for(lambda: bool(on_b.permission_requests), ARRIVES_WITHIN_S)
                request_id = on_b.permission_requests[0]["id"]
                await on_a.send(
                    {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
                )
                await turn
                await on_b.wait_for(lambda: request_id in on_b.withdrawn, ARRIVES_WITHIN_S)
                settled = on_b.cancels[-1]["_meta"]["acpctl"]["settled"]
                assert settled == {"state": "withdrawn"}
                status, late = await asyncio.to_thread(
                    _http, b.port, secret, _permission_path(sid, request_id), {"optionId": "allow"}
                )
                assert status == 409 and late["state"] == "withdrawn", late

    asyncio.run(run())
