"""A stored session as a JSONL transcript v3 file (``ControlPlane.export_jsonl`` and
``acpctl sessions export``, which reads the store without building the runtime)."""

from __future__ import annotations

import os
from pathlib import Path

from protocol.transcript.mapping import TranscriptSession, write_transcript
from store import SessionRecord, Store


def transcript_session(session: SessionRecord) -> TranscriptSession:
    imported = session.metadata.get("imported")
    header = imported.get("header") if isinstance(imported, dict) else None
    return TranscriptSession(
        id=session.id,
        cwd=session.cwd,
        created_at=session.created_at,
        agent_name=session.agent.name,
        parent_session=session.parent_id,
        # An imported session exports as the file it was imported from (docs/store.md).
        imported_header=header if isinstance(header, dict) else None,
    )


def export_session(store: Store, session_id: str, path: str | os.PathLike[str]) -> Path:
    """Write the session as a JSONL transcript v3 file (atomically); returns the path."""
    session = store.get_session(session_id)
    events = store.events(session_id)
    target = Path(path)
    write_transcript(target, transcript_session(session), events)
    return target
