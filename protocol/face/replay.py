"""A stored conversation as ``session/update`` notifications (``session/load`` in serve).

Pure: stored events in, update objects out. The user's prompts become
``user_message_chunk``s (one per content block); every agent update is replayed as recorded
(unknown kinds included); an imported transcript's entries are shown as the updates they
stand for (``protocol/transcript/replay.py``); lifecycle events of the control plane are not
part of the conversation and are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from protocol.transcript.inputs import EventLike
from protocol.transcript.replay import entry_updates
from state_machines.event_kinds import EventKind


def update_of(event: EventLike) -> dict[str, Any] | None:
    """The update object inside a stored ``session_update`` event, if it is one."""
    if event.kind != EventKind.SESSION_UPDATE:
        return None
    payload = event.payload
    params = (
        payload.get("params", payload) if payload.get("method") == "session/update" else payload
    )
    update = params.get("update") if isinstance(params, dict) else None
    return update if isinstance(update, dict) else None


INTERRUPTED_MARKER = (
    "\n\n[acpctl: this turn was interrupted by a restart of the control plane; "
    "its prompt was not sent to the agent again]"
)


def interrupted_marker(event: EventLike) -> dict[str, Any] | None:
    """The update that ends a turn a crash cut short and that will not run again."""
    if event.kind == EventKind.INTERRUPTED and event.payload.get("willRetry", True):
        return None  # it runs again: the retry's own updates follow
    if event.kind not in (EventKind.INTERRUPTED, EventKind.TURN_INTERRUPTED):
        return None
    return {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": INTERRUPTED_MARKER},
        "_meta": {"acpctl": {"interrupted": True, "commandId": event.payload.get("commandId")}},
    }


def conversation_updates(events: Iterable[EventLike]) -> Iterator[dict[str, Any]]:
    for _, update in conversation_updates_at(events):
        yield update


def conversation_updates_at(events: Iterable[EventLike]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each update with the position (``seq``) of the event it comes from: a prompt of
    several blocks gives several updates at one position."""
    for event in events:
        for update in event_updates(event):
            yield event.seq, update


def event_updates(event: EventLike) -> list[dict[str, Any]]:
    """What one stored event shows of the conversation: its agent update, the user's prompt
    (one ``user_message_chunk`` per block), an interrupted turn's marker, an imported
    transcript entry's updates, or nothing."""
    if event.kind == EventKind.SESSION_UPDATE:
        update = update_of(event)
        if update is None or update.get("sessionUpdate") == "user_message_chunk":
            return []  # an agent's echo of the prompt: the prompt event shows it
        return [update]
    marker = interrupted_marker(event)
    if marker is not None:
        return [marker]
    if event.kind == EventKind.PROMPT:
        return [
            {"sessionUpdate": "user_message_chunk", "content": block}
            for block in event.payload.get("content", [])
        ]
    if event.kind == EventKind.TRANSCRIPT_ENTRY:
        return entry_updates(event.payload)
    return []


def current_setup(events: Iterable[EventLike]) -> dict[str, Any]:
    """What the session's agent offers now (``modes``, ``models``, ``configOptions``): as its
    latest start answered, with the mode and config changes it reported since applied."""
    setup: dict[str, Any] = {}
    for event in events:
        if event.kind == EventKind.AGENT_STARTED:
            recorded = event.payload.get("sessionSetup")
            setup = json.loads(json.dumps(recorded)) if isinstance(recorded, dict) else {}
            continue
        update = update_of(event)
        if update is None:
            continue
        kind = update.get("sessionUpdate")
        if kind == "current_mode_update" and isinstance(setup.get("modes"), dict):
            setup["modes"]["currentModeId"] = update.get("currentModeId")
        elif kind == "config_option_update" and "configOptions" in update:
            setup["configOptions"] = update["configOptions"]
    return setup
