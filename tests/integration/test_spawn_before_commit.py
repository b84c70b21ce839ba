"""``Store.spawn(before_commit=...)``: what a session's start needs (a client's MCP server
secrets, kept in memory only) is put in place before the session can be seen, since the
supervisor's sweep may start it as soon as its spawn commits. A real store on each backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from state_machines import SessionNotFound
from store import AgentSpec, SpawnResult, Store


def test_before_commit_runs_while_the_session_is_not_yet_visible(
    store: Store, tmp_path: Path
) -> None:
    seen: list[tuple[str, bool]] = []

    def visible(session_id: str) -> bool:
        try:
            store.get_session(session_id)  # a reader connection, as the sweep's
        except SessionNotFound:
            return False
        return True

    def before_commit(spawned: SpawnResult) -> None:
        seen.append((spawned.session.id, visible(spawned.session.id)))

    agent = AgentSpec("a", ("true",))
    result = store.spawn(agent, str(tmp_path), None, None, "key", before_commit=before_commit)
    assert seen and all(sid == result.session.id for sid, _ in seen)
    assert not any(was_visible for _, was_visible in seen)
    assert visible(result.session.id)


def test_a_spawn_whose_before_commit_fails_is_not_made(store: Store, tmp_path: Path) -> None:
    def refuse(_: SpawnResult) -> None:
        raise RuntimeError("not ready")

    agent = AgentSpec("a", ("true",))
    with pytest.raises(RuntimeError, match="not ready"):
        store.spawn(agent, str(tmp_path), None, None, "key", before_commit=refuse)
    assert store.session_by_key("key") is None
