"""What the transcript mapping takes: events shaped like the store's (``EventLike``, so
``protocol`` needs no store import), the session's facts, and stable entry ids."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol


class EventLike(Protocol):
    """What the mapping needs from a stored event; the store's row type satisfies it."""

    @property
    def seq(self) -> int: ...

    @property
    def kind(self) -> str: ...

    @property
    def payload(self) -> Mapping[str, Any]: ...

    @property
    def created_at(self) -> datetime: ...  # timezone-aware UTC


@dataclass(frozen=True)
class TranscriptSession:
    """Session facts for the header and for the api/provider/model of assistant messages."""

    id: str
    cwd: str
    created_at: datetime
    agent_name: str
    parent_session: str | None = None
    # An imported session's: the imported file's header, which its export's header repeats
    # (with this session's id), and its log is exported as the imported entries alone.
    imported_header: Mapping[str, Any] | None = None


# --------------------------------------------------------------------------- small helpers


def entry_id(seed: str, taken: Collection[str]) -> str:
    """Derive an 8-hex-char entry id from ``seed`` that is not in ``taken``.

    Deterministic so that re-exporting the same events gives the same file; on the (rare)
    collision the seed is rehashed with a counter until the id is free.
    """
    attempt = 0
    candidate = hashlib.sha256(seed.encode("utf-8")).hexdigest()[:8]
    while candidate in taken:
        attempt += 1
        candidate = hashlib.sha256(f"{seed}#{attempt}".encode()).hexdigest()[:8]
    return candidate
