"""An imported JSONL transcript as a session, in one transaction: a file is imported whole or
not at all (``control_plane/importing.py`` reads and checks the file first).

The session is spawned under the idempotency key ``import:<SHA-256 of the file>``: importing
the same bytes again returns the session the first import made, and stores nothing. Its
entries are appended as ``transcript_entry`` events (payload: the entry's JSON text as read),
each message entry gets its search document, and the session is closed: a closed session
never runs again, which is what makes an imported session read-only.

``resume_imported`` continues one in a new session, as a fork does: the entries are copied
into the new session's log, and its first prompt carries them to its agent
(``actors/session/fork_seed.py``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from state_machines.event_kinds import EventKind
from store import queries
from store.ops.events import append_frames
from store.ops.fork import fork_session
from store.ops.search_index import add_docs
from store.ops.sessions import close_session, spawn
from store.records import AgentSpec, SessionRecord, SpawnResult
from store.writer import WriteContext

IMPORT_KEY_PREFIX = "import:"
CLOSE_REASON = "imported"


@dataclass(frozen=True)
class ImportedEntry:
    text: str  # the entry's JSON text, stored as the event's payload
    created_at: float | None  # the entry's own time (epoch seconds), if it has a readable one
    search: tuple[str, str] | None  # (role, body) of its search document, if any


@dataclass(frozen=True)
class TranscriptImport:
    sha256: str  # of the file's bytes
    agent: AgentSpec  # who wrote the conversation (a name: an imported session never runs)
    cwd: str
    metadata: dict[str, Any]  # the session's, with ``imported``
    entries: Sequence[ImportedEntry]


def import_key(sha256: str) -> str:
    """The spawn key of the session an import of a file with this SHA-256 makes."""
    return IMPORT_KEY_PREFIX + sha256


def import_transcript(ctx: WriteContext, imported: TranscriptImport) -> tuple[SessionRecord, bool]:
    """The imported session, closed, and whether this call made it (False: the same bytes
    were imported before, and that session is returned unchanged)."""
    spawned = spawn(
        ctx, imported.agent, imported.cwd, None, None, import_key(imported.sha256),
        metadata=imported.metadata,
    )  # fmt: skip
    if not spawned.created:
        return spawned.session, False
    session_id = spawned.session.id
    entries = imported.entries
    if entries:
        # One executemany: a transcript of thousands of entries is one statement's work.
        frames = [(EventKind.TRANSCRIPT_ENTRY.value, e.text, None) for e in entries]
        first = append_frames(ctx, session_id, None, frames) - len(entries) + 1
        now = time.time()
        add_docs(
            ctx,
            [
                (
                    session_id,
                    None,
                    seq,
                    e.search[0],
                    e.search[1],
                    now if e.created_at is None else e.created_at,
                )
                for seq, e in enumerate(entries, start=first)
                if e.search is not None
            ],
        )
    return close_session(ctx, session_id, CLOSE_REASON), True


def resume_imported(
    ctx: WriteContext,
    imported_id: str,
    agent: AgentSpec,
    cwd: str,
    metadata: dict[str, Any],
    idempotency_key: str | None,
) -> SpawnResult:
    """A new session of ``agent`` whose log begins with the imported session's entries; it
    starts at its first prompt, which carries them (``metadata`` has its ``forkOf``)."""
    source = queries.get_session(ctx.conn, imported_id)
    return fork_session(
        ctx, imported_id, None, source.last_event_seq, agent, cwd, metadata, idempotency_key
    )
