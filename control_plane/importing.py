"""``acpctl sessions import`` and ``ControlPlane.import_transcript``: a JSONL transcript (the
pi agent's, OpenClaw's, this project's export; versions 1 to 3) as an archived, read-only
session, and optionally a new session of an agent that continues it (``docs/store.md``,
"Import").

The file is read and checked in full before anything is written (a bad line is a
``TranscriptFormatError`` naming it); then the import, and the resume when asked, are one
transaction (``store/ops/imports.py``)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from protocol.transcript.import_plan import ImportPlan, plan_import
from store import AgentSpec, SessionRecord, Store
from store.ops import imports
from store.writer import WriteContext


@dataclass(frozen=True)
class ImportOutcome:
    session: SessionRecord  # the imported session (closed)
    created: bool  # False: the same bytes were imported before; this is that session
    entries: int  # entries in the file
    resumed: SessionRecord | None  # the session that continues it, when asked


def _stored(plan: ImportPlan) -> imports.TranscriptImport:
    imported_at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return imports.TranscriptImport(
        sha256=plan.sha256,
        # No command: an imported session is closed and never runs.
        agent=AgentSpec(plan.agent_name, ()),
        cwd=plan.cwd,
        metadata={"imported": plan.metadata(imported_at)},
        entries=[
            imports.ImportedEntry(
                e.text, e.created_at, None if e.search is None else (e.search.role, e.search.body)
            )
            for e in plan.entries
        ],
    )


def resume_cwd(plan_cwd: str, cwd: str | os.PathLike[str] | None) -> str:
    """Where a resumed session works: ``cwd`` if given, else the transcript's own working
    directory when it exists on this machine, else the current one."""
    if cwd is not None:
        return os.path.abspath(os.fspath(cwd))
    if plan_cwd and os.path.isdir(plan_cwd):
        return plan_cwd
    return os.getcwd()


def import_transcript(
    store: Store,
    path: str | os.PathLike[str],
    *,
    resume_agent: AgentSpec | None = None,
    cwd: str | os.PathLike[str] | None = None,
    idempotency_key: str | None = None,
) -> ImportOutcome:
    """Import the transcript at ``path``; with ``resume_agent``, also a new session of that
    agent seeded with the conversation (in ``cwd``: ``resume_cwd``), under
    ``idempotency_key`` if given (else every call makes a new one)."""
    source = Path(path)
    raw = source.read_bytes()
    if resume_agent is None:
        # Imported before: that session, without reading the file again (it was read then).
        known = store.session_by_key(imports.import_key(hashlib.sha256(raw).hexdigest()))
        if known is not None:
            entries = known.metadata.get("imported", {}).get("entries", 0)
            return ImportOutcome(known, False, int(entries), None)
    plan = plan_import(raw, source.name)
    stored = _stored(plan)
    where = resume_cwd(plan.cwd, cwd)

    def write(ctx: WriteContext) -> tuple[SessionRecord, bool, SessionRecord | None]:
        session, created = imports.import_transcript(ctx, stored)
        if resume_agent is None:
            return session, created, None
        origin = session.metadata["imported"]  # the first import's, if these bytes came before
        source_of = {"file": origin.get("file"), "headerId": origin.get("headerId")}
        metadata = {"forkOf": {"session": session.id, "turn": None, "imported": source_of}}
        resumed = imports.resume_imported(
            ctx, session.id, resume_agent, where, metadata, idempotency_key
        )
        return session, created, resumed.session

    session, created, resumed = store.write(write)
    return ImportOutcome(session, created, len(plan.entries), resumed)
