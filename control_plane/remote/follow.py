"""One connection following one session: every update of the session (whoever prompted it),
with its event position, once each and in commit order; and the outcome of each prompt this
connection is waiting for, told only after that prompt's updates were passed on.

Threads: the store wakes ``_on_commit`` on its writer thread (the session's mailbox stopped
being empty, store/feed.py); the rest, the take from the mailbox too, runs on the server's
loop. Opening reads the log above a position first (the catch-up) while commits already
arrive and wait in the mailbox; they are then passed on above the last position read, so
there is no gap and no repeat however the two overlap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from control_plane.api import ControlPlane
from control_plane.remote.frames import FrameCache, Frames
from state_machines import COMMAND_MACHINE
from state_machines.event_kinds import EventKind
from store import CommandRecord, SessionCommit, SessionWatch

Send = Callable[[str, Frames], None]
# Told of every event passed on or skipped (in order): the permission router puts another
# node's permission requests to this node's clients from here (permissions.py).
Noticed = Callable[[str, Sequence[Any]], None]


def _nobody(session_id: str, events: Sequence[Any]) -> None:
    return None


class SessionFollow:
    def __init__(
        self,
        cp: ControlPlane,
        session_id: str,
        send: Send,
        frames: FrameCache,
        noticed: Noticed = _nobody,
    ) -> None:
        self._cp = cp
        self._frames = frames
        self._noticed = noticed
        self.session_id = session_id
        self._send = send
        self._loop = asyncio.get_running_loop()
        self._watch: SessionWatch | None = None
        self._reading: asyncio.Task[None] | None = None  # a take reading the log
        self.position = 0  # the last event passed on (or skipped as not an update)
        self._caught_up = False
        # While > 0 (a prompt of this connection is being enqueued, its command id not yet
        # known) and while held (session/new not answered yet), commits wait.
        self._submitting = 0
        self._held = False
        self._held_pairs: Frames = []
        self._own: set[str] = set()  # this connection's prompts: not echoed back to it
        self._waiting: dict[str, asyncio.Future[CommandRecord]] = {}
        self._ended: dict[str, CommandRecord] = {}  # own prompts that ended before asked

    async def open(self, after: int | None, hold: bool = False) -> int:
        """Start following above position ``after`` (None: above the latest event, nothing
        replayed): the stored rest first, then live. With ``hold``, nothing is passed on
        until ``release``. Returns the position reached."""
        self._held = hold
        self._watch = self._cp.watch_session(self.session_id, self._on_commit)
        if after is None:
            latest = await asyncio.to_thread(self._cp.latest_event, self.session_id, ())
            self.position = 0 if latest is None else latest.seq
        else:
            stored = await asyncio.to_thread(self._cp.events, self.session_id, after)
            self.position = stored[-1].seq if stored else after
            self._emit(self._frames.frames(self.session_id, stored))
            self._noticed(self.session_id, stored)
        self._caught_up = True
        self._drain()
        return self.position

    def _emit(self, pairs: Frames) -> None:
        if self._held:
            self._held_pairs.extend(pairs)
        elif pairs:
            self._send(self.session_id, pairs)

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.cancel()

    def release(self) -> None:
        self._held = False
        held, self._held_pairs = self._held_pairs, []
        self._emit(held)
        self._drain()

    # -- this connection's prompts -----------------------------------------------------------

    def submitting(self) -> None:
        self._submitting += 1

    def submitted(self, command_id: str | None) -> None:
        """The prompt is enqueued (``None``: it was refused); held commits go on."""
        if command_id is not None:
            self._own.add(command_id)
        self._submitting -= 1
        self._drain()

    async def outcome(self, command: CommandRecord, check_every_s: float) -> CommandRecord:
        """The command's final record, once its updates have been passed on."""
        if command.state in COMMAND_MACHINE.final:
            return command
        if command.id in self._ended:
            return self._ended.pop(command.id)
        waiter = self._waiting.setdefault(command.id, self._loop.create_future())
        while True:
            try:
                return await asyncio.wait_for(asyncio.shield(waiter), check_every_s)
            except TimeoutError:
                # A long turn, or an end this follower was not told of (it cannot be, but
                # a prompt that never answers would be worse): look in the store.
                current = await asyncio.to_thread(self._cp.command, command.id)
                if current.state in COMMAND_MACHINE.final:
                    self._drain()
                    return current

    # -- commits -------------------------------------------------------------------------------

    def _on_commit(self) -> None:  # store writer thread: the mailbox stopped being empty
        self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        if not self._caught_up or self._held or self._submitting or self._watch is None:
            return  # what arrived waits in the mailbox: whatever ends the wait drains it
        if self._reading is not None:
            return  # a take that reads the log is under way; it drains again when done
        if self._watch.reads_log:
            self._reading = self._loop.create_task(self._read_then_drain(self._watch))
            return
        self._pass_on(self._watch.take())

    async def _read_then_drain(self, watch: SessionWatch) -> None:
        try:
            share = await asyncio.to_thread(watch.take)
        finally:
            self._reading = None
        if self._watch is watch:
            self._pass_on(share)
            self._drain()

    def _pass_on(self, share: SessionCommit) -> None:
        fresh = [e for e in share.events if e.seq > self.position]
        if fresh:
            self.position = fresh[-1].seq
        shown = [e for e in fresh if e.kind != EventKind.PROMPT or e.command_id not in self._own]
        self._emit(self._frames.frames(self.session_id, shown))
        if fresh:
            self._noticed(self.session_id, fresh)
        for record in share.finished:
            waiter = self._waiting.pop(record.id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(record)
            elif waiter is None and record.id in self._own:
                self._ended[record.id] = record
