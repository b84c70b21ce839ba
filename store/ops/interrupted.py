"""A turn a crash or Ctrl-C cut off, when its session's agent is started again.

Recovery puts the prompt back in the queue (``recovery.py``); at its next claim
(``turns.begin_next``) what happens depends on the restored agent and the policy:

- the agent lost the conversation (a new session, ``context_lost``), or nothing says it had
  the prompt (``reached_agent``: neither its restored conversation nor the log): the prompt
  is sent again, as it was;
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

from state_machines.event_kinds import CONVERSATION_UPDATES, EventKind
from state_machines.interrupted_turns import DEFAULT_CONTINUATION, STORED_POLICIES
from store.records import CommandKind, CommandRecord
from store.schema import events
from store.writer import WriteContext


@dataclass(frozen=True)
class RestartTerms:
    """What ``begin_next`` needs to know about the live agent and the policy."""

    context_kept: bool = False  # the agent resumed or loaded its session
    policy: str = "continue"  # the process-wide default: "continue" | "report"
    continuation: str = DEFAULT_CONTINUATION
    # Loaded with a cut-off prompt next: the last user message its replay held (None: not
    # loaded, nothing cut off, or the replay held no user message).
    restored_prompt: str | None = None


KEPT_NOTHING = RestartTerms()


def session_policy(metadata: dict[str, Any], default: str) -> str:
    stored = metadata.get("interruptedTurns")
    return stored if stored in STORED_POLICIES else default


def was_cut_off(command: CommandRecord) -> bool:
    """Before its claim: a prompt claimed before (each claim counts an attempt), which a
    crash or Ctrl-C cut short and recovery queued again."""
    return command.kind is CommandKind.PROMPT and command.attempts >= 1


def reached_agent(ctx: WriteContext, command: CommandRecord, restart: RestartTerms) -> bool:
    """Whether the agent had ``command``'s prompt. Its own word first: the conversation it
    restored with ``session/load`` ends with what was sent for the command (``_replayed``).
    Else the log: an update of the conversation (a message, a thought, a tool call, a
    plan) recorded under the command. Updates an agent sends unprompted (slash commands,
    mode, config) say nothing: one can land under the command just after its prompt event.
    Neither: it may not have had it (cut off during its start, or before its first update
    was written; Codex and Gemini CLI say nothing while a shell tool they may run runs), so
    the prompt itself is sent: sending a prompt twice to a conversation is recoverable; a
    continuation of a prompt never received is not."""
    restored = restart.restored_prompt
    if restored is not None and _replayed(ctx, command, restart, _words(restored)):
        return True
    after = 0
    while True:  # a page at a time: the first conversation update is usually the first row
        rows = ctx.conn.execute(
            select(events.c.seq, events.c.payload)
            .where(
                events.c.session_id == command.session_id,
                events.c.command_id == command.id,
                events.c.kind == EventKind.SESSION_UPDATE.value,
                events.c.seq > after,
            )
            .order_by(events.c.seq)
            .limit(_PAGE)
        ).all()
        if any(_update_kind(payload) in CONVERSATION_UPDATES for _, payload in rows):
            return True
        if len(rows) < _PAGE:
            return False
        after = rows[-1][0]


_PAGE = 50


def _replayed(ctx: WriteContext, command: CommandRecord, restart: RestartTerms, said: str) -> bool:
    """Whether the restored conversation's last user message (``said``) is what was sent
    for ``command``: its prompt's words, as whole words (an agent may re-wrap them or add
    to them, so contained, not equal), or the continuation prompt, if one was sent for this
    command before. No evidence when that message also holds the prompt sent before the
    command (the last turn the agent surely had): an earlier prompt with the same words, or
    words that hold these ("go on" in "go on please"), or an earlier command's
    continuation, would pass for this one. The log decides then."""
    own_continuation, before = _sent_around(ctx, command)
    asked = [_prompt_text(command)] + ([restart.continuation] if own_continuation else [])
    if not any(_holds(said, _words(text)) for text in asked):
        return False
    return not _holds(said, before)


def _sent_around(ctx: WriteContext, command: CommandRecord) -> tuple[bool, str]:
    """Whether a continuation was sent for ``command`` (an earlier attempt of it), and the
    words of the prompt sent before its first attempt ("" if none). Its own prompt events
    are the newest (it heads the queue again): one per earlier claim, and a claim given back
    (``unclaim``) leaves its event too, so they are read a page at a time until another's."""
    continued = False
    below = None  # the page's cursor: seqs under it
    while True:
        query = select(events.c.seq, events.c.command_id, events.c.payload).where(
            events.c.session_id == command.session_id,
            events.c.kind == EventKind.PROMPT.value,
        )
        if below is not None:
            query = query.where(events.c.seq < below)
        rows = ctx.conn.execute(query.order_by(events.c.seq.desc()).limit(_PAGE)).all()
        for seq, command_id, payload in rows:
            sent = json.loads(payload)
            if command.id not in (sent.get("commandIds") or [command_id]):
                return continued, _words(_content_text(sent.get("content", [])))
            continued = continued or bool(sent.get("continuation"))
            below = seq
        if len(rows) < _PAGE:
            return continued, ""


def _update_kind(payload: str) -> str | None:
    try:
        kind = json.loads(payload)["params"]["update"]["sessionUpdate"]
    except (ValueError, KeyError, TypeError):
        return None
    return kind if isinstance(kind, str) else None


def _prompt_text(command: CommandRecord) -> str:
    return _content_text(command.payload.get("content", []))


def _content_text(blocks: Any) -> str:
    if not isinstance(blocks, list):
        return ""
    return " ".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict))


def _words(text: str) -> str:
    """Whitespace-insensitive: an agent may re-wrap what it saved."""
    return " ".join(text.split())


def _holds(said: str, words: str) -> bool:
    """``words`` (normalized) in ``said`` as whole words: "yes" is not in "yesterday"."""
    return bool(words) and f" {words} " in f" {said} "


def as_continuation(command: CommandRecord, text: str) -> CommandRecord:
    """``command`` as the continued turn sends it: the continuation prompt in place of its
    content, marked so the ``prompt`` event and the export say what it is."""
    payload = dict(command.payload)
    payload["content"] = [{"type": "text", "text": text}]
    payload["continuation"] = True
    return replace(command, payload_json=json.dumps(payload))
