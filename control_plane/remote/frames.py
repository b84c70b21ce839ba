"""The ``session/update`` frames of a session's events, built once however many connections
follow the session: each follower gets the same bytes (the update, the session id and the
event's position are all the frame holds), so a second watcher costs a buffer append and
its share of a socket write, not a second parse and serialisation of every update.

On the server's loop only (no lock). Bounded in bytes: the frames of the most recent
events up to ``max_bytes`` (a tool's megabyte of output must not be kept thousands of
times over); an evicted event is serialised again if a late follower needs it."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from protocol import json_codec
from protocol.face.replay import event_updates
from protocol.transcript.inputs import EventLike

Frames = list[tuple[int, bytes]]  # (position, one JSON-RPC notification), in order


class FrameCache:
    def __init__(self, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._built: OrderedDict[tuple[str, int], list[bytes]] = OrderedDict()
        self._bytes = 0
        self.built = 0  # frames serialised (for tests and benchmarks)

    def frames(self, session_id: str, events: Iterable[EventLike]) -> Frames:
        out: Frames = []
        for event in events:
            key = (session_id, event.seq)
            built = self._built.get(key)
            if built is None:
                built = [_frame(session_id, event.seq, u) for u in event_updates(event)]
                self.built += len(built)
                self._built[key] = built
                self._bytes += sum(len(frame) for frame in built)
                while self._bytes > self.max_bytes and len(self._built) > 1:
                    _, evicted = self._built.popitem(last=False)
                    self._bytes -= sum(len(frame) for frame in evicted)
            out.extend((event.seq, frame) for frame in built)
        return out


def _frame(session_id: str, position: int, update: dict[str, object]) -> bytes:
    return json_codec.dumps(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {
                "sessionId": session_id,
                "update": update,
                "_meta": {"acpctl": {"position": position}},
            },
        }
    )
