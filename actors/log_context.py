"""Which session (and command) the current thread works for, for structured logs.

A session actor runs on a thread of its own, so a thread-local says it for every line that
thread logs: ``control_plane/logs.py`` puts it into each JSON log line. Threads shared by
many sessions (the protocol loop, the writer) bind nothing; their messages name the session
themselves."""

from __future__ import annotations

import threading

_local = threading.local()


def bind(session_id: str | None, command_id: str | None = None) -> None:
    _local.session_id = session_id
    _local.command_id = command_id


def current() -> tuple[str | None, str | None]:
    """(session id, command id) bound on this thread, or Nones."""
    return getattr(_local, "session_id", None), getattr(_local, "command_id", None)
