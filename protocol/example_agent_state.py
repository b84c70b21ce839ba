"""Session persistence for the example ACP agent (``protocol.example_agent``).

The example agent must survive a restart: a *new* process started with the same
state file has to serve ``session/load`` and ``session/resume`` for sessions that
an earlier process created.  Sessions are therefore written to a JSON file after
every change.

Several agent processes may share one state file (the default lives in the
process cwd), so every save is a read-modify-write of just the one session under
an exclusive ``flock`` on a sidecar lock file, and the new content replaces the
old with ``os.replace`` of a fsync-ed temp file: a reader never sees a torn file
and two processes never drop each other's sessions.
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
from typing import Any

log = logging.getLogger("example_agent.state")

STATE_VERSION = 1


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


class StateFile:
    """A JSON file holding ``{"version": 1, "sessions": {id: record}}``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load_all(self) -> dict[str, SessionRecord]:
        """Read every stored session; a missing or unreadable file reads as empty."""
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            # A corrupt state file must not stop the agent from serving new sessions.
            log.warning("ignoring unreadable state file %s: %s", self.path, exc)
            return {}
        sessions = raw.get("sessions", {}) if isinstance(raw, dict) else {}
        out: dict[str, SessionRecord] = {}
        for sid, rec in sessions.items():
            try:
                out[sid] = SessionRecord.from_json(rec)
            except (KeyError, TypeError) as exc:
                log.warning("skipping malformed session %s: %s", sid, exc)
        return out

    def get(self, session_id: str) -> SessionRecord | None:
        """Return one stored session, or None."""
        return self.load_all().get(session_id)

    def save(self, record: SessionRecord) -> None:
        """Insert or replace one session, keeping everyone else's sessions."""
        with self._locked():
            sessions = self.load_all()
            sessions[record.session_id] = record
            payload = {
                "version": STATE_VERSION,
                "sessions": {sid: rec.to_json() for sid, rec in sessions.items()},
            }
            self._write_atomically(json.dumps(payload, indent=1))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold an exclusive flock on ``<state>.lock`` (the state file itself is replaced)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        with open(lock_path, "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _write_atomically(self, text: str) -> None:
        """Write ``text`` to a temp file in the same directory, fsync, then rename over."""
        fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
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
