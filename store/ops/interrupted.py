"""A turn a crash or Ctrl-C cut off, when its session's agent is started again.

Recovery puts the prompt back in the queue (``recovery.py``); at its next claim
(``turns.begin_next``) what happens depends on the restored agent and the policy:

- the agent lost the conversation (a new session, ``context_lost``), or the prompt never
  reached it (no update of the agent for that command is in the log): the prompt is sent
  again, as it was;
- the agent restored the conversation and had the prompt: with ``continue`` (the default)
  a *continuation prompt* is sent in its place, recorded as such (the ``prompt`` event has
  ``continuation: true`` and ``attempt``, under the original command's id); the command's
  outcome is that turn's, counted as its next attempt; with ``report`` (and the older
  ``retry``) the command ends ``interrupted`` and is not sent again.

A session's own ``interruptedTurns`` metadata wins over the process-wide policy (serve
stores ``report``: recovery ends its cut-off prompts at once, ``recovery.py``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select

from state_machines.event_kinds import EventKind
from state_machines.interrupted_turns import DEFAULT_CONTINUATION, STORED_POLICIES
from store.records import CommandRecord
from store.schema import events
from store.writer import WriteContext


@dataclass(frozen=True)
class RestartTerms:
    """What ``begin_next`` needs to know about the live agent and the policy."""

    context_kept: bool = False  # the agent resumed or loaded its session
    policy: str = "continue"  # the process-wide default: "continue" | "report"
    continuation: str = DEFAULT_CONTINUATION


KEPT_NOTHING = RestartTerms()


def session_policy(metadata: dict[str, Any], default: str) -> str:
    stored = metadata.get("interruptedTurns")
    return stored if stored in STORED_POLICIES else default


def reached_agent(ctx: WriteContext, command: CommandRecord) -> bool:
    """Whether the agent answered anything for ``command`` (an update in the log): then it
    had the prompt. None recorded: it may not have (cut off during its start, or before
    its first update was written), so the prompt itself is sent: sending a prompt twice
    to a conversation is recoverable; a continuation of a prompt never received is not."""
    found = ctx.conn.execute(
        select(events.c.id)
        .where(
            events.c.session_id == command.session_id,
            events.c.command_id == command.id,
            events.c.kind == EventKind.SESSION_UPDATE.value,
        )
        .limit(1)
    ).first()
    return found is not None


def as_continuation(command: CommandRecord, text: str) -> CommandRecord:
    """``command`` as the continued turn sends it: the continuation prompt in place of its
    content, marked so the ``prompt`` event and the export say what it is."""
    payload = dict(command.payload)
    payload["content"] = [{"type": "text", "text": text}]
    payload["continuation"] = True
    return replace(command, payload_json=json.dumps(payload))
