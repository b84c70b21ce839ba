"""A session spawned straight in a store with its first prompt queued, for the store-level
tests of feeds and the recorder (no actors, no agent)."""

from __future__ import annotations

from pathlib import Path

from store import Store
from tests.conftest import AGENT

PROMPT = [{"type": "text", "text": "hello"}]


def spawned_session(store: Store, tmp: Path) -> tuple[str, str]:
    """(session id, its first command's id)."""
    spawned = store.spawn(AGENT, str(tmp), None, PROMPT, None)
    assert spawned.command is not None
    return spawned.session.id, spawned.command.id


def kinds_after_spawn(store: Store, session_id: str) -> list[str]:
    """The kinds of the session's events, ``session_created`` left out."""
    return [e.kind for e in store.events(session_id) if e.kind != "session_created"]
