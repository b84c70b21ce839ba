"""Delivery sinks: where a binding's events go.

A sink receives events in seq order, each with its global event id, and must treat an id it
has seen as already delivered: after a crash between a sink accepting events and the
checkpoint moving, the projector hands the same events again. ``deliver`` returning means
accepted (durably, for the file sink); raising means rejected, retried later.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from store import EventRecord
from store.faults import fault_point


class Sink(Protocol):
    def deliver(self, events: Sequence[EventRecord]) -> None: ...

    def close(self) -> None: ...


def event_line(event: EventRecord) -> dict[str, object]:
    """The JSON object a file sink writes per event (the payload embedded as JSON)."""
    return {
        "eventId": event.id,
        "sessionId": event.session_id,
        "seq": event.seq,
        "commandId": event.command_id,
        "kind": event.kind,
        "createdAt": event.created_at.isoformat(),
        "payload": json.loads(event.raw),
    }


class CallbackSink:
    """Hands each event to an in-process function. The function dedupes by ``event.id`` if it
    outlives a restart; within one process, the projector never repeats an accepted event."""

    def __init__(self, fn: Callable[[EventRecord], None]) -> None:
        self._fn = fn

    def deliver(self, events: Sequence[EventRecord]) -> None:
        for event in events:
            self._fn(event)

    def close(self) -> None:
        return None


class JsonlFileSink:
    """Appends one JSON line per event to a file, fsync-ed before ``deliver`` returns.

    On open it reads the ids already in the file, so re-delivered events are skipped. A last
    line torn by a crash (no newline) was never acknowledged: it is cut off before appending.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seen: set[int] = set()
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        self._load_and_repair()
        self._fh = open(path, "ab")  # noqa: SIM115 - held open for the sink's lifetime

    def _load_and_repair(self) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb+") as fh:
            data = fh.read()
            end = data.rfind(b"\n") + 1
            if end != len(data):
                fh.truncate(end)  # the torn tail of a write that was never acknowledged
                fh.flush()
                os.fsync(fh.fileno())
        for line in data[:end].splitlines():
            try:
                self._seen.add(int(json.loads(line)["eventId"]))
            except (ValueError, KeyError, TypeError):
                continue  # not ours; a reader skips lines that do not parse

    def deliver(self, events: Sequence[EventRecord]) -> None:
        with self._lock:
            fresh = [e for e in events if e.id not in self._seen]
            if not fresh:
                return
            blob = b"".join(
                json.dumps(event_line(e), ensure_ascii=False, separators=(",", ":")).encode()
                + b"\n"
                for e in fresh
            )
            self._fh.write(blob)
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._seen.update(e.id for e in fresh)
        fault_point("delivery.after_sink_write")

    def close(self) -> None:
        with self._lock:
            self._fh.close()

    def delivered_ids(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._seen)
