"""What a forked session's new agent is told: the conversation it continues, rendered from
the session's own log (the copied prefix and any turns since), sent with the first prompt
that agent gets. An agent cannot be given a conversation any other way through ACP:
``session/fork`` copies a whole session the agent still has, not a prefix.

A session that resumes an imported transcript is seeded the same way: its log begins with the
transcript's entries (``transcript_entry`` events), rendered as the conversation the
transcript's model saw (``protocol/transcript/context.py``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from protocol.transcript.context import seed_lines
from state_machines.event_kinds import EventKind
from store import EventRecord, NewEvent, Store


def seed_block(
    store: Store, session_id: str, command_id: str, fork_of: dict[str, Any]
) -> dict[str, Any]:
    """The text block sent before the prompt of ``command_id``, recorded as a ``fork_seed``
    event (its length: the text is derivable from the log)."""
    events = store.events(session_id)
    # Up to this turn's own prompt event (written by its claim): the prompt follows the
    # conversation, not inside it.
    cut = next(
        (
            i
            for i, e in enumerate(events)
            if e.kind == EventKind.PROMPT and e.payload.get("commandId") == command_id
        ),
        len(events),
    )
    text = seed_text(events[:cut], fork_of)
    note = {"commandId": command_id, "chars": len(text)}
    store.append_events(session_id, command_id, [NewEvent(EventKind.FORK_SEED, note)])
    return {"type": "text", "text": text}


def seed_text(events: Iterable[EventRecord], fork_of: dict[str, Any]) -> str:
    lines: list[str] = []
    reply: list[str] = []
    imported: list[dict[str, Any]] = []  # consecutive transcript entries, rendered together

    def flush() -> None:
        if reply:
            lines.append("Assistant: " + "".join(reply).strip())
            reply.clear()

    for event in events:
        payload = event.payload
        if event.kind == EventKind.TRANSCRIPT_ENTRY:
            flush()
            imported.append(payload)
            continue
        if imported:
            lines.extend(seed_lines(imported))
            imported.clear()
        if event.kind == EventKind.PROMPT:
            flush()
            texts = [
                str(block.get("text", ""))
                for block in payload.get("content", [])
                if isinstance(block, dict) and block.get("type") == "text"
            ]
            lines.append("User: " + "\n".join(texts).strip())
        elif event.kind == EventKind.SESSION_UPDATE:
            update = (payload.get("params") or {}).get("update") or {}
            kind = update.get("sessionUpdate")
            if kind == "agent_message_chunk":
                reply.append(str((update.get("content") or {}).get("text", "")))
            elif kind == "tool_call":
                flush()
                lines.append(f"(tool call: {update.get('title') or update.get('kind') or 'tool'})")
        elif event.kind in (EventKind.TURN_ENDED, EventKind.TURN_FAILED):
            flush()
    flush()
    lines.extend(seed_lines(imported))
    conversation = "<conversation>\n" + "\n".join(lines) + "\n</conversation>\n"
    origin = fork_of.get("imported")
    if isinstance(origin, dict):
        return (
            f"This session continues a conversation imported from the transcript file "
            f"{origin.get('file')} (session {origin.get('headerId')} of the agent that wrote "
            "it). The conversation so far, as that transcript recorded it:\n"
            + conversation
            + "The user's next message follows."
        )
    source, turn = fork_of.get("session"), fork_of.get("turn")
    # Only a fork with a worktree of its own has the files as they were at that turn.
    files = "; the files are as they were then" if fork_of.get("workspace") else ""
    return (
        f"This session continues a conversation forked from session {source} at the end of "
        f"its turn {turn}{files}. The conversation so far, as the control plane recorded "
        "it:\n" + conversation + "The user's next message follows."
    )
