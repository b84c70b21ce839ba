"""Whether a cut-off prompt reached the agent (store/ops/interrupted.py ``reached_agent``),
decided on the real store as a restart decides it: a turn claimed and cut off (recovery
queues its prompt again), the agent started again with its conversation, the next claim.

Continued (a continuation prompt in its place) only if the agent had the prompt: an update
of the conversation under its command, or the restored conversation ending with it (the
load's replay). An update an agent sends unprompted (its slash commands) is no sign: one
recorded just after the prompt event used to make a prompt the agent never had continued."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from store import BindingSpec, NewEvent, SinkKind, Store, ops
from store.ops import turns
from store.ops.interrupted import RestartTerms
from tests.conftest import AGENT

PROMPT_TEXT = "list the files\nthen count them"
PROMPT = [{"type": "text", "text": PROMPT_TEXT}]
TERMS = RestartTerms(context_kept=True, policy="continue", continuation="go on")


def _update(kind: str, text: str | None = None) -> NewEvent:
    update: dict[str, Any] = {"sessionUpdate": kind}
    if text is not None:
        update["content"] = {"type": "text", "text": text}
    params = {"sessionId": "a", "update": update}
    frame = {"jsonrpc": "2.0", "method": "session/update", "params": params}
    return NewEvent("session_update", json.dumps(frame))


def _restarted_claim(
    store: Store, tmp_path: Path, under_the_prompt: list[NewEvent], restored: str | None
) -> bool:
    """Run the turn until the cut, restart, claim again: whether the prompt was continued."""
    binding = BindingSpec(SinkKind.JSONL, str(tmp_path / "sink.jsonl"))
    sid = store.spawn(AGENT, "/work", binding, PROMPT, "k").session.id
    epoch = store.write(lambda ctx: ops.acquire(ctx, sid, "first"))
    store.write(lambda ctx: turns.agent_started(ctx, sid, epoch, "a", "new", {}))
    (claimed,) = store.write(lambda ctx: turns.begin_next(ctx, sid, epoch, collect=False))
    if under_the_prompt:
        store.append_events(sid, claimed.id, under_the_prompt)
    store.write(lambda ctx: ops.recover_sessions(ctx, {sid}))  # the crash
    store.write(lambda ctx: ops.release(ctx, sid, "first", epoch))
    epoch = store.write(lambda ctx: ops.acquire(ctx, sid, "second"))
    store.write(lambda ctx: turns.agent_started(ctx, sid, epoch, "a", "loaded", {}))
    terms = RestartTerms(
        TERMS.context_kept, TERMS.policy, TERMS.continuation, restored_prompt=restored
    )
    (again,) = store.write(
        lambda ctx: turns.begin_next(ctx, sid, epoch, collect=False, restart=terms)
    )
    assert again.id == claimed.id and again.attempts == 2
    prompt_event = [e for e in store.events(sid) if e.kind == "prompt"][-1]
    payload = prompt_event.payload
    continued = bool(payload.get("continuation"))
    assert payload["content"] == ([{"type": "text", "text": "go on"}] if continued else PROMPT)
    return continued


CASES = {
    "nothing recorded, nothing restored": ([], None, False),
    "only its slash commands under the prompt": (
        [_update("available_commands_update"), _update("current_mode_update")],
        None,
        False,
    ),
    "a message under the prompt": (
        [_update("available_commands_update"), _update("agent_message_chunk", "ok")],
        None,
        True,
    ),
    "a tool call under the prompt": ([_update("tool_call")], None, True),
    "nothing recorded, the replay ends with the prompt (re-wrapped)": (
        [],
        "list the files then   count them",
        True,
    ),
    "nothing recorded, the replay ends with the prompt and more": (
        [],
        f"{PROMPT_TEXT}\n\n--- Content from referenced files ---",
        True,
    ),
    "nothing recorded, the replay ends with the continuation sent for it": ([], "go on", True),
    "nothing recorded, the replay ends with an earlier prompt": ([], "an earlier ask", False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_cut_off_prompt_is_continued_only_if_the_agent_had_it(
    store: Store, tmp_path: Path, case: str
) -> None:
    under_the_prompt, restored, continued = CASES[case]
    assert _restarted_claim(store, tmp_path, under_the_prompt, restored) is continued
