"""Per-session agent stderr log files: where they live, and the tail that goes into an
``agent_exited`` event. stderr goes to a file, never a pipe: an unread pipe blocks the agent
at about 64 KB."""

from __future__ import annotations

import os

TAIL_BYTES = 8192


def tail_lines(path: str, lines: int = 20) -> list[str]:
    """The last ``lines`` lines of the file (reads at most ``TAIL_BYTES`` from its end)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - TAIL_BYTES))
            data = fh.read()
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace")
    return [line[:500] for line in text.splitlines()[-lines:]]
