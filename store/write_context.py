"""What a write function is handed (``WriteContext``) and what a committed transaction
changed (``Commit``): the group-commit writer (store/writer.py) builds the one for each
write and the other for each group."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Connection

from store.driver_errors import is_connection_level
from store.raw import RawConnection, later, raw_for
from store.records import BindingRecord, EventRecord

T = TypeVar("T")
# One append of a write: (session_id, first seq, command_id, frames, created_at, the
# events' global ids in seq order).
Appended = tuple[str, int, str | None, Sequence[tuple[str, str, Any]], float, Sequence[int]]


def appended_events(entry: Appended) -> list[EventRecord]:
    """The records of one append, as a read of the log would return them."""
    session_id, first, command_id, frames, created, ids = entry
    return [
        EventRecord(event_id, session_id, first + i, command_id, kind, text, created)
        for i, (event_id, (kind, text, _)) in enumerate(zip(ids, frames, strict=True))
    ]


class WriteContext:
    """What a write function gets: the connection inside the open transaction, and a way to
    act once that transaction has committed (wake a waiter, notify delivery).

    A plain class with slots, built once per write on the writer thread: it is on the path
    of every write."""

    __slots__ = ("_hooks", "appended", "bound", "conn", "finished_records", "raw")

    def __init__(self, conn: Connection, raw: RawConnection | None = None) -> None:
        self.conn = conn
        # The driver connection inside the same transaction (for the fixed hot-path SQL).
        self.raw: RawConnection = raw if raw is not None else raw_for(conn)
        self._hooks: list[Callable[[], None]] = []
        # What this write appended and finished; listeners and session feeds are told after
        # the commit (``Commit``). One entry per append, ``(session_id, first seq,
        # command_id, frames, created_at)`` with frames ``(kind, JSON text, parsed or
        # None)``, and the records of commands that reached a final state. References only:
        # nothing is copied unless someone watches.
        self.appended: list[Appended] = []
        self.finished_records: list[Any] = []
        # Bindings this write created (spawn, bind), so delivery knows them without a read.
        self.bound: list[BindingRecord] = []

    def after_commit(self, hook: Callable[[], None]) -> None:
        self._hooks.append(hook)

    def isolated(self, fn: Callable[[WriteContext], T]) -> tuple[bool, T | Exception]:
        """Run ``fn`` inside a savepoint of this write: if it raises, what it wrote (and
        what it registered here for after the commit) is undone and ``(False, error)``
        returned, while the rest of the write stands. Lock and I/O errors still propagate."""
        raw = self.raw
        marks = (len(self._hooks), len(self.appended), len(self.finished_records), len(self.bound))
        later(raw, "SAVEPOINT isolated")  # sent with the first statement of ``fn``
        try:
            value = fn(self)
        except Exception as exc:
            if is_connection_level(exc):
                raise
            raw.execute("ROLLBACK TO isolated")
            later(raw, "RELEASE isolated")
            del self._hooks[marks[0] :], self.appended[marks[1] :]
            del self.finished_records[marks[2] :], self.bound[marks[3] :]
            return False, exc
        later(raw, "RELEASE isolated")
        return True, value


WriteFn = Callable[[WriteContext], T]


@dataclass
class Commit:
    """What one committed transaction changed, for the listeners told after it."""

    appended: list[Appended] = field(default_factory=list)
    finished_records: list[Any] = field(default_factory=list)
    bound: list[BindingRecord] = field(default_factory=list)  # bindings created

    def add(self, ctx: WriteContext) -> None:
        self.appended += ctx.appended
        self.finished_records += ctx.finished_records
        self.bound += ctx.bound

    @property
    def sessions(self) -> set[str]:
        """Sessions with new events."""
        return {entry[0] for entry in self.appended}

    def __bool__(self) -> bool:
        return bool(self.appended or self.finished_records or self.bound)
