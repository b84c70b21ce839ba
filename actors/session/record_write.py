"""One write of a session's recorder (``recorder.py``): the frames it appends, the callers it
settles, and the transaction that does both.

Fixed when the recorder submits it, so the writer thread, which runs the transaction and
settles the callers, reads nothing the protocol loop changes afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from store import ops
from store.writer import WriteContext

# (command id, (kind, JSON text, the tap's parse of it or None))
Frame = tuple[str | None, tuple[str, str, Any]]
# A caller's write behind the frames (``write_after``) and the future it settles.
After = tuple[Callable[[WriteContext], Any], Future[Any]]


@dataclass
class RecordWrite:
    """One write to the store and the callers it settles (fixed at submission)."""

    frames: list[Frame]
    afters: list[After]
    flushes: list[Future[None]] = field(default_factory=list)

    def transaction(
        self, session_id: str, epoch: int | None
    ) -> Callable[[WriteContext], list[tuple[bool, Any]]]:
        """The write function: the frames appended (fenced by ``epoch``: ``StaleEpoch``
        when the session has a new owner), then each caller's write; each caller's
        ``(ok, value or error)`` in order."""

        def transaction(ctx: WriteContext) -> list[tuple[bool, Any]]:
            if self.frames:
                append(ctx, session_id, self.frames, epoch)
            elif len(self.afters) == 1 and not self.flushes:
                # One caller's write alone (a turn's outcome with no updates left to write):
                # nothing else in it to keep if it raises, so no savepoint (two statements
                # on most turns' ends); its error fails this write and reaches it as its own.
                return [(True, self.afters[0][0](ctx))]
            return [ctx.isolated(fn) for fn, _ in self.afters]

        return transaction


def append(ctx: WriteContext, session_id: str, batch: list[Frame], epoch: int | None) -> None:
    """The frames in order, one ``append_frames`` per run of one command's frames."""
    run: list[tuple[str, str, Any]] = []
    run_command: str | None = batch[0][0]
    for command_id, event in batch:
        if command_id != run_command:
            ops.append_frames(ctx, session_id, run_command, run, epoch)
            run, run_command = [], command_id
        run.append(event)
    ops.append_frames(ctx, session_id, run_command, run, epoch)
