"""Two ``acpctl serve --listen`` processes on one SQLite file: a client of B following a
session that a client of A prompts sees A's updates within a moment (B's poller of the
file, store/sqlite_watch.py), each once and in order, not after serve's 30 s re-check."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.support.remote_client import ListenServer, make_token, ws_client

# The poller checks every 50 ms; the bound leaves room for a 2-core machine running other
# tests beside this one, and stays far below serve's 30 s re-check (FEED_CHECK_S).
ARRIVES_WITHIN_S = 2.0
TURNS = 3


@pytest.mark.timeout(240)
def test_a_client_of_another_process_follows_a_sessions_turns_at_once(tmp_path: Path) -> None:
    db = str(tmp_path / "cp.db")
    secret = make_token(db, "follow-tests")
    nodes: list[ListenServer] = []

    async def run() -> None:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            nodes.append(ListenServer(tmp_path / name, db=db).start())
        a, b = nodes
        async with ws_client(a.ws_url, secret) as on_a, ws_client(b.ws_url, secret) as on_b:
            await on_a.initialize()
            await on_b.initialize()
            sid = await on_a.new_session(str(tmp_path))
            await on_b.load(sid, str(tmp_path))
            for turn in range(TURNS):
                answer = await on_a.prompt(sid, f"#chunks=20 turn {turn}")
                assert answer["stopReason"] == "end_turn"
                done_at = time.monotonic()
                want = on_a.text(sid)

                def arrived(want: str = want) -> bool:
                    return on_b.text(sid) == want

                await on_b.wait_for(arrived, ARRIVES_WITHIN_S)
                print(f"turn {turn}: on B {time.monotonic() - done_at:.3f} s after A's answer")
            seen = on_b.positions(sid)
            assert seen == sorted(set(seen))  # each once, in order
            assert set(on_a.positions(sid)) <= set(seen)  # none missing

    try:
        asyncio.run(run())
    finally:
        for node in nodes:
            node.stop()
