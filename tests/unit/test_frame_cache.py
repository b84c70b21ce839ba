"""An update is serialised once for every follower of its session, and the cache of frames
stays within its byte bound."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from control_plane.remote.frames import FrameCache


@dataclass
class Event:
    seq: int
    kind: str
    payload: dict[str, Any]
    command_id: str | None = None
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))


def chunk(seq: int, text: str) -> Event:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return Event(seq, "session_update", {"sessionId": "agent-side", "update": update})


def test_followers_share_one_serialisation_and_positions_ride_along() -> None:
    cache = FrameCache()
    events = [
        chunk(1, "a"),
        chunk(2, "b"),
        Event(3, "prompt", {"content": [{"type": "text", "text": "q"}]}),
    ]
    first = cache.frames("s1", events)
    second = cache.frames("s1", events)
    assert first == second and cache.built == 3
    decoded = [json.loads(frame) for _, frame in first]
    assert [d["params"]["_meta"]["acpctl"]["position"] for d in decoded] == [1, 2, 3]
    assert {d["params"]["sessionId"] for d in decoded} == {"s1"}
    assert decoded[2]["params"]["update"]["sessionUpdate"] == "user_message_chunk"
    assert cache.frames("s2", events[:1]) != first[:1]  # another session, its own frames


def test_the_cache_stays_within_its_bytes() -> None:
    cache = FrameCache(max_bytes=50_000)
    for seq in range(1, 200):
        cache.frames("s", [chunk(seq, "x" * 1_000)])
    assert cache._bytes <= 50_000  # the bound is the point of the test
    before = cache.built
    cache.frames("s", [chunk(1, "x" * 1_000)])  # evicted long ago: built again
    assert cache.built == before + 1
