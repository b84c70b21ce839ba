"""The console's session list on the server (control_plane/remote/console_api.py): pages
that follow a cursor to the end with no cap, search over what was said, an ``own`` token
that sees none of them, and refusals of a bad cursor, state or query, against a real
``serve --listen``."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from store.tokens import TokenAccess, TokenSessions
from tests.support.cp_harness import noop_agent, open_cp
from tests.support.remote_client import make_token, running_server


def _get(port: int, secret: str, **params: str) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/sessions?{urllib.parse.urlencode(params)}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {secret}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


@pytest.mark.timeout(180)
def test_the_list_pages_to_the_end_and_search_finds_what_was_said(tmp_path: Path, db: str) -> None:
    made = []
    with open_cp(tmp_path, db=db) as cp:
        for i in range(5):
            word = "zebra" if i % 2 else "okapi"
            spawned = cp.spawn(noop_agent(), tmp_path, f"{word} sighting {i}")
            assert spawned.command is not None
            assert cp.wait(spawned.command.id, 60).error is None
            made.append(spawned.session.id)
    own = make_token(db, "own-only", TokenAccess.CONTROL, TokenSessions.OWN)
    with running_server(tmp_path, token_name="console-api", db=db) as server:
        seen: list[str] = []
        cursor = None
        for _ in range(5):
            params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
            status, page = _get(server.port, server.secret, **params)
            assert status == 200, page
            seen += [s["id"] for s in page["sessions"]]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert seen == list(reversed(made))  # newest updated first, each once, to the end

        status, found = _get(server.port, server.secret, q="zebra", limit="1")
        assert status == 200 and [s["id"] for s in found["sessions"]] == [made[3]]
        assert "zebra sighting 3" in found["sessions"][0]["match"]["snippet"]
        status, rest = _get(server.port, server.secret, q="zebra", cursor=found["nextCursor"])
        assert [s["id"] for s in rest["sessions"]] == [made[1]] and rest["nextCursor"] is None
        # An id typed into the search box finds its session first.
        _, by_id = _get(server.port, server.secret, q=made[0])
        assert by_id["sessions"][0]["id"] == made[0]
        _, closed = _get(server.port, server.secret, q="okapi", state="closed,error")
        assert closed["sessions"] == []

        assert _get(server.port, own) == (200, {"sessions": [], "nextCursor": None})
        for bad, says in (
            ({"cursor": "nonsense"}, "cursor"),
            ({"cursor": "d12", "q": ""}, "cursor"),
            ({"state": "bogus"}, "no session state"),
            ({"q": "!!"}, "nothing to search for"),
            ({"limit": "0"}, "limit"),
        ):
            status, refused = _get(server.port, server.secret, **bad)
            assert status == 400 and says in json.dumps(refused), (bad, refused)
