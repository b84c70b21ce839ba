"""``ControlPlane.import_transcript`` (``ControlPlane`` inherits it): the import itself is
``control_plane/importing.py``, loaded only when a transcript is imported (it brings the
transcript reader)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from control_plane.services import FrontEndServices

if TYPE_CHECKING:
    from control_plane.api import AgentInput
    from control_plane.importing import ImportOutcome


class TranscriptImports(FrontEndServices):
    def import_transcript(
        self,
        path: str | os.PathLike[str],
        *,
        resume: AgentInput | None = None,
        cwd: str | os.PathLike[str] | None = None,
        idempotency_key: str | None = None,
    ) -> ImportOutcome:
        """A JSONL transcript (versions 1 to 3) as a closed, read-only session; the same bytes
        again return that session. With ``resume`` (an agent, as ``spawn`` takes one), also a
        new session of that agent whose first prompt carries the conversation
        (``docs/store.md``, "Import"). A bad line: ``TranscriptFormatError`` with its number."""
        from control_plane.importing import import_transcript

        spec = None if resume is None else self.resolve_agent(resume)
        if spec is not None:
            self.settings.agent_profiles.remember(spec)
        outcome = import_transcript(
            self._store, path, resume_agent=spec, cwd=cwd, idempotency_key=idempotency_key
        )
        if outcome.resumed is not None:  # its agent starts now, as a fork's does
            self._supervisor.notify(outcome.resumed.id)
        return outcome
