"""Session persistence for the example ACP agent (``protocol.example_agent``).

The example agent must survive a restart: a *new* process started with the same
state file has to serve ``session/load`` and ``session/resume`` for sessions that
an earlier process created.  Every change is therefore recorded in the state file
as soon as it happens.

Format (version 2): an append-only JSON Lines journal.  Each ``save(record)``
appends exactly one line describing the change to one session::

    {"v":2,"session_id":"...","cwd":"...","mode":"...","model":"...","title":null,
     "updated_at":"...","turns":[{"user":"...","message":"...","reply":"..."}]}

``turns`` holds only the turns this :class:`StateFile` has not journaled yet for
that session; a line with ``"replace_history":true`` carries the session's whole
history instead (first save of a record this instance never read, or a history
that shrank).  :meth:`StateFile.load_all` replays the journal: later header
fields win and turns are appended in order.  Why: the old format (one JSON
object re-serialised and fsync-ed on every save) cost time proportional to every
turn ever taken by any session; a journal line costs time proportional to the
change, so a turn costs the same whether it is the first or the thousandth.
The journal is never compacted: it only grows, like the conversation itself.

A torn line (the last one, when a process is killed in the middle of a write) or
any other unparsable line is skipped with a warning; a writer that finds the file
not ending in a newline starts its line on a fresh one, so it never glues its
record to a torn one.

Durability: lines are written with one ``write`` and flushed to the kernel but
*not* fsync-ed.  Data in the kernel survives a ``kill -9`` of the agent, which is
what the tests and users rely on; surviving a power loss is not a goal of the
example agent, and a per-turn fsync would compete with the control plane's own
SQLite fsyncs in benchmarks.

Several agent processes may share one state file (the default lives in the
process cwd).  Appends happen under an exclusive ``flock`` on a sidecar
``<state>.lock`` file (reads take it shared), the file is opened after the lock
is taken and in append mode, so lines never interleave and two processes writing
different sessions never lose each other's data.  Two processes changing the
*same* session concurrently is not supported (as before, the result is a mix or
the last writer wins).

A version-1 file (one indented JSON object ``{"version": 1, "sessions": {...}}``)
still loads; the next save rewrites it once as a journal (temp file, fsync,
``os.replace``) and appends from there.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

log = logging.getLogger("example_agent.state")

STATE_VERSION = 2

_HEADER_FIELDS = ("cwd", "mode", "model", "title", "updated_at")
"""Session fields carried by every journal line (besides ``session_id``)."""


def utc_now() -> str:
    """Return the current time as an ISO 8601 string (for ``updatedAt``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class Turn:
    """One finished (or cancelled) prompt turn.

    ``user`` is the full prompt text as the client sent it (replayed verbatim by
    ``session/load``); ``message`` is that text without directives (listed by
    ``#history``); ``reply`` is the agent text that was actually streamed.
    """

    user: str
    message: str
    reply: str


@dataclass
class SessionRecord:
    """Everything the agent remembers about one session."""

    session_id: str
    cwd: str
    mode: str = "default"
    model: str = "example-small"
    title: str | None = None
    updated_at: str = field(default_factory=utc_now)
    history: list[Turn] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Serialise to a plain JSON-compatible dict."""
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SessionRecord:
        """Rebuild a record written by :meth:`to_json` (tolerating missing keys)."""
        history = [Turn(**t) for t in raw.get("history", [])]
        return cls(
            session_id=str(raw["session_id"]),
            cwd=str(raw.get("cwd", "")),
            mode=str(raw.get("mode", "default")),
            model=str(raw.get("model", "example-small")),
            title=raw.get("title"),
            updated_at=str(raw.get("updated_at") or utc_now()),
            history=history,
        )


@dataclass
class _Replay:
    """Sessions being rebuilt from journal lines (header fields and turns kept apart)."""

    headers: dict[str, dict[str, Any]] = field(default_factory=dict)
    turns: dict[str, list[Turn]] = field(default_factory=dict)

    def apply(self, sid: str, header: dict[str, Any], turns: list[Turn], replace: bool) -> None:
        """Merge one change: later header fields win, turns append (or replace)."""
        self.headers.setdefault(sid, {}).update(header)
        if replace:
            self.turns[sid] = list(turns)
        else:
            self.turns.setdefault(sid, []).extend(turns)

    def apply_line(self, entry: Any) -> None:
        """Apply one parsed journal line; raise on anything malformed (nothing applied then)."""
        if not isinstance(entry, dict):
            raise TypeError(f"expected an object, got {type(entry).__name__}")
        if "session_id" not in entry and isinstance(entry.get("sessions"), dict):
            # A compact (single-line) version-1 file: a snapshot of every session.
            self.apply_snapshot(entry["sessions"])
            return
        sid = str(entry["session_id"])
        turns = _turns(entry.get("turns", []))
        header = {k: entry[k] for k in _HEADER_FIELDS if k in entry}
        self.apply(sid, header, turns, replace=bool(entry.get("replace_history")))

    def apply_snapshot(self, sessions: dict[str, Any]) -> None:
        """Apply a version-1 ``sessions`` mapping (a malformed session is skipped)."""
        for sid, rec in sessions.items():
            try:
                if not isinstance(rec, dict):
                    raise TypeError(f"expected an object, got {type(rec).__name__}")
                if "session_id" not in rec:  # version 1 skipped those too
                    raise KeyError("session_id")
                turns = _turns(rec.get("history", []))
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("skipping malformed session %s: %s", sid, exc)
                continue
            header = {k: rec[k] for k in _HEADER_FIELDS if k in rec}
            self.apply(str(sid), header, turns, replace=True)

    def records(self) -> dict[str, SessionRecord]:
        """The rebuilt sessions, in order of first appearance."""
        out: dict[str, SessionRecord] = {}
        for sid, header in self.headers.items():
            try:
                record = SessionRecord.from_json({**header, "session_id": sid})
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("skipping malformed session %s: %s", sid, exc)
                continue
            record.history = self.turns.get(sid, [])
            out[sid] = record
        return out


def _turns(raw: Any) -> list[Turn]:
    """Parse a list of turn objects; raise TypeError if it is not one."""
    if not isinstance(raw, list):
        raise TypeError(f"expected a list of turns, got {type(raw).__name__}")
    return [Turn(**t) for t in raw]


def _line(record: SessionRecord, turns: list[Turn], replace: bool = False) -> bytes:
    """One journal line: ``record``'s header fields plus ``turns``."""
    entry: dict[str, Any] = {"v": STATE_VERSION, "session_id": record.session_id}
    entry.update((k, getattr(record, k)) for k in _HEADER_FIELDS)
    entry["turns"] = [{"user": t.user, "message": t.message, "reply": t.reply} for t in turns]
    if replace:
        entry["replace_history"] = True
    return (json.dumps(entry, separators=(",", ":")) + "\n").encode("utf-8")


def _is_legacy(head: bytes) -> bool:
    """Whether a file starting with ``head`` is an indented version-1 object.

    ``json.dumps(indent=1)`` puts a lone ``{`` on the first line; a journal line
    is compact JSON and starts with ``{"``.
    """
    return head[:1] == b"{" and head[1:2] in (b"\n", b"\r")


class StateFile:
    """An append-only JSON Lines journal of session changes (see the module docstring).

    Keeps, per session, how many turns are already in the journal (learnt from
    :meth:`load_all` / :meth:`get` and from its own saves), so that :meth:`save`
    appends only what is new.  That bookkeeping is tied to the file it was learnt
    from: if the file was replaced or truncated meanwhile, the next save of each
    session carries its full history again.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._journaled: dict[str, int] = {}
        # (st_dev, st_ino, size) of the file when ``_journaled`` was last brought up to date.
        self._seen: tuple[int, int, int] | None = None

    def load_all(self) -> dict[str, SessionRecord]:
        """Read every stored session; a missing or unreadable file reads as empty."""
        read = self._read()
        if read is None:
            return {}
        data, st = read
        sessions = self._parse(data)
        self._remember(sessions, st, len(data))
        return sessions

    def get(self, session_id: str) -> SessionRecord | None:
        """Return one stored session, or None. Only the lines that name it are parsed: the
        journal of a long-used state file holds every session any process ever had (a
        shared default file reached hundreds of MB on a test machine, and every
        ``session/load`` parsed all of it)."""
        read = self._read()
        if read is None:
            return None
        data, st = read
        record = self._parse(data, only=session_id).get(session_id)
        self._remember_one(session_id, record, st, len(data))
        return record

    def _read(self) -> tuple[bytes, os.stat_result] | None:
        """The file's bytes and stat, read under the shared lock; None when missing or
        unreadable."""
        if not self.path.exists():
            return None
        try:
            with self._locked(shared=True), open(self.path, "rb") as fh:
                st = os.fstat(fh.fileno())
                return fh.read(), st
        except FileNotFoundError:
            return None
        except OSError as exc:
            # A corrupt state file must not stop the agent from serving new sessions.
            log.warning("ignoring unreadable state file %s: %s", self.path, exc)
            return None

    def save(self, record: SessionRecord) -> None:
        """Append one journal line with the session's header and its not-yet-journaled turns."""
        with self._locked():
            with open(self.path, "a+b") as fh:  # opened under the lock: always the current file
                legacy = _is_legacy(os.pread(fh.fileno(), 2, 0))
                if not legacy:
                    self._append(fh, record)
            if legacy:
                self._convert_legacy()
                with open(self.path, "a+b") as fh:
                    self._append(fh, record)
        self._journaled[record.session_id] = len(record.history)

    def _append(self, fh: BinaryIO, record: SessionRecord) -> None:
        """Write ``record``'s journal line to ``fh`` (append mode) with one write, then flush."""
        fd = fh.fileno()
        st = os.fstat(fd)
        if self._seen is None or self._seen[:2] != (st.st_dev, st.st_ino):
            self._journaled.clear()  # learnt from another file (or never learnt)
        elif st.st_size < self._seen[2]:
            self._journaled.clear()  # the file was truncated under us
        done = self._journaled.get(record.session_id)
        if done is None or done > len(record.history):
            # Unknown or shrunk history: carry all of it and replace what is stored.
            data = _line(record, record.history, replace=True)
        else:
            data = _line(record, record.history[done:])
        if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
            data = b"\n" + data  # never glue a record onto a torn last line
        fh.write(data)
        fh.flush()  # reaches the kernel: survives kill -9 (no fsync, see the module docstring)
        # The file now holds at least st_size + our line; other writers are locked out.
        self._seen = (st.st_dev, st.st_ino, st.st_size + len(data))

    def _parse(self, data: bytes, only: str | None = None) -> dict[str, SessionRecord]:
        """Rebuild sessions from a journal (or a version-1 file). ``only``: lines that do not
        contain that session id (JSON-quoted) are skipped unparsed; the result holds that
        session, and possibly others named in the same lines."""
        replay = _Replay()
        needle = None if only is None else json.dumps(only).encode("utf-8")
        if _is_legacy(data[:2]):
            try:
                raw = json.loads(data)
            except ValueError as exc:
                log.warning("ignoring unreadable state file %s: %s", self.path, exc)
                return {}
            sessions = raw.get("sessions", {}) if isinstance(raw, dict) else {}
            if isinstance(sessions, dict):
                replay.apply_snapshot(sessions)
            return replay.records()
        for lineno, line in enumerate(data.split(b"\n"), start=1):
            if not line.strip() or (needle is not None and needle not in line):
                continue
            try:
                entry = json.loads(line)
            except ValueError as exc:
                log.warning("skipping unparsable line %d of %s: %s", lineno, self.path, exc)
                continue
            try:
                replay.apply_line(entry)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("skipping malformed line %d of %s: %s", lineno, self.path, exc)
        return replay.records()

    def _remember(self, sessions: dict[str, SessionRecord], st: os.stat_result, size: int) -> None:
        """Record how many turns of each session the file at ``st`` (``size`` bytes) holds.

        What was read under the lock is everything anyone journaled, this process's
        saves included, so it replaces the bookkeeping rather than merging into it.
        """
        self._journaled = {sid: len(rec.history) for sid, rec in sessions.items()}
        self._seen = (st.st_dev, st.st_ino, size)

    def _remember_one(
        self, session_id: str, record: SessionRecord | None, st: os.stat_result, size: int
    ) -> None:
        """``_remember`` for one session read with ``get``: what was learnt of the others
        stands if the file is the same one, not shorter."""
        seen = self._seen
        if seen is None or seen[:2] != (st.st_dev, st.st_ino) or size < seen[2]:
            self._journaled.clear()
        if record is None:
            self._journaled.pop(session_id, None)
        else:
            self._journaled[session_id] = len(record.history)
        self._seen = (st.st_dev, st.st_ino, size)

    def _convert_legacy(self) -> None:
        """Rewrite a version-1 file as a journal, once (caller holds the exclusive lock)."""
        sessions = self._parse(self.path.read_bytes())
        journal = b"".join(_line(rec, rec.history) for rec in sessions.values())
        self._write_atomically(journal)
        log.info("converted %s to the journal format (%d sessions)", self.path, len(sessions))
        st = os.stat(self.path)
        self._remember(sessions, st, len(journal))

    @contextlib.contextmanager
    def _locked(self, shared: bool = False) -> Iterator[None]:
        """Hold a flock on ``<state>.lock`` (the state file itself may be replaced)."""
        lock_path = self.path.with_name(self.path.name + ".lock")
        if not shared:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            lock: BinaryIO | None
            try:
                lock = stack.enter_context(open(lock_path, "a+b"))
            except OSError as exc:
                if not shared:
                    raise
                # Reading must keep working without write access to the directory.
                log.debug("reading %s without a lock: %s", self.path, exc)
                lock = None
            if lock is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
                stack.callback(fcntl.flock, lock.fileno(), fcntl.LOCK_UN)
            yield

    def _write_atomically(self, data: bytes) -> None:
        """Write ``data`` to a temp file in the same directory, fsync, then rename over."""
        fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def append_invocation(path: Path, entry: dict[str, Any]) -> None:
    """Append one JSON line and fsync it, so a crash right after still leaves the record."""
    line = json.dumps(entry, separators=(",", ":")) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())
