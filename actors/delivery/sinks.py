"""Delivery sinks: where a binding's events go.

A sink receives events in seq order, each with its global event id, and must treat an id it
has seen as already delivered: after a crash between a sink accepting events and the
checkpoint moving, the projector hands the same events again. Event ids are unique within
one store only (a store deleted and created again starts at 1): a sink that outlives stores
keys what it holds by the store's identity too. ``deliver`` returning means
accepted (durably, for the file sink); raising means rejected, retried later.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

from store import EventRecord
from store.faults import fault_point


class Sink(Protocol):
    def deliver(self, events: Sequence[EventRecord]) -> None: ...

    def close(self) -> None: ...


def event_line(event: EventRecord, store_id: str | None = None) -> dict[str, object]:
    """The JSON object a file sink writes per event (the payload embedded as JSON)."""
    line: dict[str, object] = {"storeId": store_id} if store_id else {}
    return line | {
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


def _read_at(fd: int, offset: int, size: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class JsonlFileSink:
    """Appends one JSON line per event to a file, fsync-ed before ``deliver`` returns.

    It keeps the ids already in the file, with the identity of the store each came from
    (``storeId``), so re-delivered events are skipped and a new store's events are not taken
    for an old store's (lines written before identities existed count as this store's). A
    last line torn by a crash (no newline) was never acknowledged: it is cut off before
    appending.

    Several processes may deliver to one file (each process that opens the control plane
    resumes every binding): every read and append happens under an exclusive ``flock`` on the
    file, and before appending the sink reads what others appended since its last look. The
    file stays one ordered run of ids with none twice (a batch only ever continues what the
    checkpoint says is in the file already).
    """

    def __init__(self, path: str, store_id: str = "") -> None:
        self.path = path
        self.store_id = store_id
        self._lock = threading.Lock()
        self._seen: set[int] = set()  # ids of this store's events in the file
        self._known = 0  # bytes of the file whose ids are in _seen
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        # A raw descriptor, no Python buffer: bytes an append failed to write (a full disk)
        # must never reach the file later, behind the dedupe's back.
        self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        with self._lock, self._file_locked():
            self._catch_up()

    @contextmanager
    def _file_locked(self) -> Iterator[None]:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _catch_up(self) -> None:
        """Read the ids appended since the last look (by this process or another); cut a
        torn tail (a writer died mid-line: with the lock held, nobody is writing now)."""
        size = os.fstat(self._fd).st_size
        if size < self._known:  # cut by hand, or replaced: read it all again
            self._known = 0
            self._seen.clear()
        if size == self._known:
            return
        data = _read_at(self._fd, self._known, size - self._known)
        end = data.rfind(b"\n") + 1
        if end != len(data):
            os.ftruncate(self._fd, self._known + end)  # never acknowledged
            os.fsync(self._fd)
        for line in data[:end].splitlines():
            try:
                entry = json.loads(line)
                if entry.get("storeId", self.store_id) == self.store_id:
                    self._seen.add(int(entry["eventId"]))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # not ours; a reader skips lines that do not parse
        self._known += end

    def deliver(self, events: Sequence[EventRecord]) -> None:
        with self._lock, self._file_locked():
            self._catch_up()
            fresh = [e for e in events if e.id not in self._seen]
            if fresh:
                blob = b"".join(
                    json.dumps(
                        event_line(e, self.store_id), ensure_ascii=False, separators=(",", ":")
                    ).encode()
                    + b"\n"
                    for e in fresh
                )
                self._append(blob)
                self._seen.update(e.id for e in fresh)
                self._known += len(blob)
        if fresh:
            fault_point("delivery.after_sink_write")

    def _append(self, blob: bytes) -> None:
        """Write ``blob`` at the end (O_APPEND) and fsync it, or leave the file as it was:
        on any error the part that got written is cut off again before the lock is let go,
        so a retry appends the batch once, whole."""
        try:
            view = memoryview(blob)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._known)
            raise

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)

    def delivered_ids(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._seen)
