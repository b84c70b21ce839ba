"""One prompt's updates, forwarded to serve's client as they commit, then its outcome.

From the session feed (store/feed.py), not by reading the log back; the outcome commits
after, or with, the turn's last update, so every update has been sent by the time it comes.
Each update goes out as the agent's own frame text with the session id swapped in
(``client_io.forwarded_line``): no update object is read out of it and none serialized again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from control_plane.api import ControlPlane
from control_plane.outcome import Outcome
from control_plane.serve.client_io import (
    forwarded_line,
    session_id_field,
    update_line,
    write_lines,
)
from control_plane.serve.feed import TurnFeed
from protocol.face.replay import update_of
from state_machines import COMMAND_MACHINE, CommandState
from state_machines.event_kinds import EventKind
from store import CommandRecord, CommittedEvent, EventRecord

# How long a prompt waits on its feed before checking the command in the store itself.
FEED_CHECK_S = 30.0


async def stream_turn(
    cp: ControlPlane, out: asyncio.StreamWriter, command: CommandRecord, feed: TurnFeed
) -> Outcome:
    """Forward the command's updates as they are committed, then return its outcome."""
    session_id, command_id = command.session_id, command.id
    last = 0
    if command.state is not CommandState.QUEUED:
        # A repeated request (same idempotency key) for a command that already ran or is
        # running: what it committed before we watched is in the log.
        last = await _forward_stored(cp, out, session_id, command_id, last)
        if command.state in COMMAND_MACHINE.final:
            return Outcome.of(command)
    while True:
        share = await feed.next(FEED_CHECK_S)
        if share is None:
            # Nothing committed for a while: a long turn, or a turn that ended without this
            # watcher being told (it cannot, but a hung prompt would be worse).
            current = await asyncio.to_thread(cp.command, command_id)
            if current.state not in COMMAND_MACHINE.final:
                continue
            await _forward_stored(cp, out, session_id, command_id, last)
            return Outcome.of(current)
        last = await forward(out, session_id, command_id, share.events, last)
        for record in share.finished:
            if record.id == command_id:
                return Outcome.of(record)


async def _forward_stored(
    cp: ControlPlane, out: asyncio.StreamWriter, session_id: str, command_id: str, last: int
) -> int:
    """Send the command's updates found in the log above ``last``."""
    stored = await asyncio.to_thread(cp.command_events, session_id, command_id)
    return await forward(out, session_id, command_id, stored, last)


async def forward(
    out: asyncio.StreamWriter,
    session_id: str,
    command_id: str,
    events: Sequence[EventRecord | CommittedEvent],
    last: int,
) -> int:
    """Send the updates of ``command_id`` among ``events``, each once: events at or below
    ``last`` were sent. Returns the new ``last``."""
    lines: list[bytes] = []
    session_field = session_id_field(session_id)
    for event in events:
        if event.seq <= last or event.command_id != command_id:
            continue
        last = event.seq
        if event.kind != EventKind.SESSION_UPDATE:
            continue
        line = None
        if isinstance(event, CommittedEvent) and event.parsed is not None:
            line = forwarded_line(event.raw, event.parsed, session_field)
        if line is None:
            update = update_of(event)
            if update is None:
                continue
            line = update_line(session_id, update)
        lines.append(line)
    await write_lines(out, lines)
    return last
