"""A session's workspace as its actor uses it (``actors/workspace``): made and set up
before the agent's start, a checkpoint after every turn end, the files put back to the last
checkpoint before a turn a crash or Ctrl-C cut off is run again. Each step is recorded in
the session's log. Runs on the actor's thread: git's few milliseconds (a setup command's
minutes) hold only this session."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from actors.workspace import (
    WorkspaceError,
    WorkspaceSpec,
    ensure_worktree,
    restore,
    take_checkpoint,
    workspace_of,
)
from actors.workspace.checkpoint import ref_of
from actors.workspace.git import git, worktree_lock
from state_machines.event_kinds import EventKind
from store import CommandKind, CommandRecord, NewEvent, queries
from store.ops.commands import interrupt_command
from store.writer import WriteContext

if TYPE_CHECKING:
    from actors.settings import RuntimeSettings
    from store import SessionRecord, Store

log = logging.getLogger(__name__)

# Appended to the continuation prompt of a workspace session: its files were put back.
RESTORED_NOTE = (
    "\n\nThe files of your workspace were restored to how they were when the cut-off turn "
    "began, so edits it made are gone: make again those that are still needed."
)


class SessionWorkspace:
    def __init__(
        self, spec: WorkspaceSpec, session_id: str, store: Store, log_dir: str, setup_s: float
    ) -> None:
        self.spec = spec
        self.session_id = session_id
        self.store = store
        self.setup_log = os.path.join(log_dir, f"{session_id}.setup.log")
        self.setup_timeout_s = setup_s

    @classmethod
    def of(
        cls, session: SessionRecord, store: Store, settings: RuntimeSettings
    ) -> SessionWorkspace | None:
        """The session's workspace, if its metadata gives it one."""
        spec = workspace_of(session.metadata)
        if spec is None:
            return None
        return cls(spec, session.id, store, settings.log_dir, settings.workspace_setup_s)

    def prepare(self) -> None:
        """The worktree exists, is set up, and its newest checkpoint is of the last turn
        that ended (``WorkspaceError`` when it cannot be). Under the worktree's lock: a
        second preparer waits, then finds it ready."""
        with worktree_lock(self.spec.repo, self.spec.path):
            self._prepare()

    def _prepare(self) -> None:
        ready = ensure_worktree(self.spec, self.setup_log, self.setup_timeout_s)
        newest_seq, newest = self._newest()
        if newest_seq >= 0 and not ready.made:
            self._catch_up(newest_seq)
            return
        if newest_seq >= 0:
            # Made again (someone removed it): its files come back from its last checkpoint.
            self._restore(None, newest, "the worktree was made again")
            return
        # Made now, or ready with no checkpoint: a crash fell between the ready marker and
        # checkpoint 0, and no turn ran there (a turn starts only after this), so the
        # worktree as its setup left it is the baseline still.
        baseline = take_checkpoint(self.spec, self.session_id, 0)
        payload: dict[str, Any] = {
            "path": self.spec.path,
            "branch": self.spec.branch,
            "base": self.spec.base,
            "ref": baseline.ref,
            "commit": baseline.commit,
            "tree": baseline.tree,
        }
        if ready.setup_exit is not None:
            payload["setup"] = {
                "command": self.spec.setup,
                "exit": ready.setup_exit,
                "seconds": round(ready.setup_s or 0.0, 3),
                "log": self.setup_log,
            }
        self._record(None, EventKind.WORKSPACE_READY, payload)

    def _catch_up(self, newest_seq: int) -> None:
        """A turn ended but the process died before its checkpoint (the newest is
        ``newest_seq``): taken now (nothing ran in the worktree since: the next turn starts
        only after a checkpoint), so a later restore does not go back past that turn's
        edits."""
        kinds = (EventKind.TURN_ENDED.value, EventKind.TURN_FAILED.value)
        ended = self.store.read(lambda c: queries.last_event_of_kinds(c, self.session_id, kinds))
        if ended is None or ended.command_id is None:
            return
        seq = self.store.get_command(ended.command_id).seq
        if newest_seq < seq:
            self.checkpoint(ended.command_id, seq)

    def checkpoint(self, command_id: str, seq: int) -> None:
        """After a turn's end: its files to ``refs/acpctl/<session>/<seq>``. A failure is
        logged and recorded, never the turn's: the next turn's checkpoint covers it."""
        try:
            made = take_checkpoint(self.spec, self.session_id, seq, self.last_commit())
        except WorkspaceError as exc:
            log.warning("session %s: checkpoint failed: %s", self.session_id, exc)
            self._record(command_id, EventKind.CHECKPOINT, {"seq": seq, "error": str(exc)})
            return
        payload: dict[str, Any] = {
            "seq": seq,
            "ref": made.ref,
            "commit": made.commit,
            "tree": made.tree,
            "ms": round(made.seconds * 1000, 1),
        }
        self._record(command_id, EventKind.CHECKPOINT, payload)

    def restore_before_claim(self, write: Callable[[Callable[[WriteContext], Any]], Any]) -> bool:
        """Before the next prompt is claimed: if a crash or Ctrl-C cut it off (it was
        claimed before), its files go back to the last checkpoint first, so no half-done
        edit is applied twice. When they cannot be, it is not run on them: it ends
        ``interrupted`` through ``write``, saying why (the files stay as the cut-off turn
        left them, for a person to look at), and False."""
        head = self.store.read(lambda c: queries.next_queued(c, self.session_id))
        if head is None or head.kind is not CommandKind.PROMPT or head.attempts == 0:
            return True
        if self.restore_for(head):
            return True
        error = (
            "not run again: the workspace could not be restored to its last checkpoint "
            "(see the workspace_restored event), and a cut-off turn left its files half-done"
        )
        write(lambda ctx: interrupt_command(ctx, head.id, error))
        return False

    def restore_for(self, command: CommandRecord) -> bool:
        """Before a cut-off turn runs again: the files as at the last checkpoint. False
        (recorded, logged) when they could not be put back."""
        try:
            commit = self.last_commit()
        except WorkspaceError as exc:
            log.warning("session %s: no checkpoint to restore: %s", self.session_id, exc)
            self._record(command.id, EventKind.WORKSPACE_RESTORED, {"error": str(exc)})
            return False
        return self._restore(command.id, commit, "a turn was cut off")

    def _restore(self, command_id: str | None, commit: str, why: str) -> bool:
        try:
            written, removed = restore(self.spec, commit)
        except WorkspaceError as exc:
            log.warning("session %s: restoring the workspace failed: %s", self.session_id, exc)
            self._record(command_id, EventKind.WORKSPACE_RESTORED, {"error": str(exc)})
            return False
        payload = {"to": commit, "why": why, "files": written, "removed": removed[:100]}
        self._record(command_id, EventKind.WORKSPACE_RESTORED, payload)
        return True

    def last_commit(self) -> str:
        """The newest checkpoint's commit (refs are the source: a checkpoint whose event a
        crash cut off still counts), else the worktree's base."""
        return self._newest()[1]

    def _newest(self) -> tuple[int, str]:
        """(seq, commit) of the newest checkpoint; (-1, base) when there is none."""
        prefix = ref_of(self.session_id, 0).rsplit("/", 1)[0] + "/"
        out = git(["for-each-ref", "--format=%(refname) %(objectname)", prefix], self.spec.path)
        newest = (-1, self.spec.base)
        for line in out.splitlines():
            name, _, commit = line.partition(" ")
            tail = name.rsplit("/", 1)[-1]
            if tail.isdigit() and int(tail) > newest[0]:
                newest = (int(tail), commit)
        return newest

    def _record(self, command_id: str | None, kind: EventKind, payload: dict[str, Any]) -> None:
        try:
            self.store.append_events(self.session_id, command_id, [NewEvent(kind, payload)])
        except Exception:  # the record is a report: the work it reports is done already
            log.exception("session %s: recording %s failed", self.session_id, kind.value)
