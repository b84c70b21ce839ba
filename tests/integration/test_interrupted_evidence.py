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

from state_machines import CommandState
from store import BindingSpec, CommandKind, CommandRecord, NewEvent, SinkKind, Store, ops
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
    store: Store,
    tmp_path: Path,
    under_the_prompt: list[NewEvent],
    restored: str | None,
    earlier: tuple[Earlier, ...] = (),
) -> bool:
    """Run the turns before (``earlier``), then the prompt's turn until the cut, restart,
    claim again: whether the prompt was continued."""
    binding = BindingSpec(SinkKind.JSONL, str(tmp_path / "sink.jsonl"))
    sid = store.spawn(AGENT, "/work", binding, None, None).session.id
    epoch = store.write(lambda ctx: ops.acquire(ctx, sid, "first"))
    store.write(lambda ctx: turns.agent_started(ctx, sid, epoch, "a", "new", {}))
    for text, cut in earlier:
        epoch = _earlier_turn(store, sid, epoch, text, cut)
    cmd = store.enqueue(sid, CommandKind.PROMPT, {"content": PROMPT}).command
    (claimed,) = store.write(lambda ctx: turns.begin_next(ctx, sid, epoch, collect=False))
    if under_the_prompt:
        store.append_events(sid, claimed.id, under_the_prompt)
    epoch, again = _cut_and_claim(store, sid, epoch, restored)
    assert again.id == cmd.id and again.attempts == 2
    payload = _sent(store, sid)
    continued = bool(payload.get("continuation"))
    assert payload["content"] == (_text("go on") if continued else PROMPT)
    return continued


# An earlier turn: its prompt's text, and None, or what the restored conversation ended
# with when a cut cut it off (it ran to its end after).
Earlier = tuple[str, str | None]


def _earlier_turn(store: Store, sid: str, epoch: int, text: str, cut: str | None) -> int:
    cmd = store.enqueue(sid, CommandKind.PROMPT, {"content": _text(text)}).command
    (claimed,) = store.write(lambda ctx: turns.begin_next(ctx, sid, epoch, collect=False))
    if cut is not None:  # cut off, and continued as the restored conversation says
        epoch, claimed = _cut_and_claim(store, sid, epoch, cut)
    assert claimed.id == cmd.id
    ended = {"stopReason": "end_turn"}
    store.write(
        lambda ctx: turns.finish_turn(
            ctx, sid, epoch, (claimed.id,), ended, CommandState.COMPLETED, None
        )
    )
    return epoch


def _cut_and_claim(
    store: Store, sid: str, epoch: int, restored: str | None
) -> tuple[int, CommandRecord]:
    """A crash mid-turn, the agent started again with its conversation, the next claim."""
    store.write(lambda ctx: ops.recover_sessions(ctx, {sid}))
    store.write(lambda ctx: ops.release(ctx, sid, "owner", epoch))
    epoch = store.write(lambda ctx: ops.acquire(ctx, sid, "owner"))
    store.write(lambda ctx: turns.agent_started(ctx, sid, epoch, "a", "loaded", {}))
    terms = RestartTerms(
        TERMS.context_kept, TERMS.policy, TERMS.continuation, restored_prompt=restored
    )
    (claimed,) = store.write(
        lambda ctx: turns.begin_next(ctx, sid, epoch, collect=False, restart=terms)
    )
    return epoch, claimed


def _sent(store: Store, sid: str) -> dict[str, Any]:
    """The payload of the last prompt event: what went to the agent."""
    return [e for e in store.events(sid) if e.kind == "prompt"][-1].payload


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


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
    "nothing recorded, the replay ends with an earlier prompt": ([], "an earlier ask", False),
    "nothing recorded, the replay holds the prompt's letters, not its words": (
        [],
        f"re{PROMPT_TEXT}selves",
        False,
    ),
}

# What a replay says when turns came before: the last of them is a turn the agent surely had,
# so a replay that also holds its prompt tells nothing (the log decides).
CASES_AFTER_TURNS: dict[str, tuple[tuple[Earlier, ...], str | None, bool]] = {
    "an earlier turn, the replay ends with the prompt": (
        (("an earlier ask", None),),
        PROMPT_TEXT,
        True,
    ),
    "an earlier turn with the same words, nothing recorded": (
        ((PROMPT_TEXT, None),),
        PROMPT_TEXT,
        False,
    ),
    "an earlier turn whose words hold these, nothing recorded": (
        ((f"{PROMPT_TEXT} and say which is largest", None),),
        f"{PROMPT_TEXT} and say which is largest",
        False,
    ),
    "an earlier command continued, the replay ends with its continuation": (
        (("an earlier ask", "an earlier ask"),),
        "go on",
        False,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_cut_off_prompt_is_continued_only_if_the_agent_had_it(
    store: Store, tmp_path: Path, case: str
) -> None:
    under_the_prompt, restored, continued = CASES[case]
    assert _restarted_claim(store, tmp_path, under_the_prompt, restored) is continued


@pytest.mark.parametrize("case", list(CASES_AFTER_TURNS))
def test_a_replay_that_also_holds_the_turn_before_is_no_evidence(
    store: Store, tmp_path: Path, case: str
) -> None:
    earlier, restored, continued = CASES_AFTER_TURNS[case]
    assert _restarted_claim(store, tmp_path, [], restored, earlier) is continued


def test_the_continuation_counts_when_it_was_sent_for_this_prompt(
    store: Store, tmp_path: Path
) -> None:
    """Cut off, continued, cut off again before the agent said anything: its replay ends
    with the continuation sent for this prompt, so the agent had it: continued again."""
    binding = BindingSpec(SinkKind.JSONL, str(tmp_path / "sink.jsonl"))
    sid = store.spawn(AGENT, "/work", binding, PROMPT, "k").session.id
    epoch = store.write(lambda ctx: ops.acquire(ctx, sid, "owner"))
    store.write(lambda ctx: turns.agent_started(ctx, sid, epoch, "a", "new", {}))
    (first,) = store.write(lambda ctx: turns.begin_next(ctx, sid, epoch, collect=False))
    epoch, second = _cut_and_claim(store, sid, epoch, PROMPT_TEXT)
    assert _sent(store, sid).get("continuation") is True and second.id == first.id
    epoch, third = _cut_and_claim(store, sid, epoch, "go on")
    assert third.id == first.id and third.attempts == 3
    assert _sent(store, sid) == {
        "commandId": first.id,
        "content": _text("go on"),
        "continuation": True,
        "attempt": 3,
    }
    # The same replay, with no continuation ever sent for this prompt, is no evidence.
    assert _restarted_claim(store, tmp_path / "other", [], "go on") is False


def test_claims_given_back_unsent_do_not_hide_the_prompt_before(
    store: Store, tmp_path: Path
) -> None:
    """Each claim writes its prompt event; a claim given back unsent (``unclaim``) leaves it
    there, so the prompt's own events outnumber its attempts. The prompt before is still
    found: a replay ending with the same words as that earlier prompt is no evidence."""
    binding = BindingSpec(SinkKind.JSONL, str(tmp_path / "sink.jsonl"))
    sid = store.spawn(AGENT, "/work", binding, None, None).session.id
    epoch = store.write(lambda ctx: ops.acquire(ctx, sid, "owner"))
    store.write(lambda ctx: turns.agent_started(ctx, sid, epoch, "a", "new", {}))
    epoch = _earlier_turn(store, sid, epoch, PROMPT_TEXT, None)
    cmd = store.enqueue(sid, CommandKind.PROMPT, {"content": PROMPT}).command
    for _ in range(3):
        _claim_and_give_back(store, sid, epoch)
    store.write(lambda ctx: turns.begin_next(ctx, sid, epoch, collect=False))
    own = [e for e in store.events(sid) if e.kind == "prompt" and e.command_id == cmd.id]
    assert len(own) == 4 and store.get_command(cmd.id).attempts == 1
    epoch, again = _cut_and_claim(store, sid, epoch, PROMPT_TEXT)
    assert again.id == cmd.id and _sent(store, sid)["content"] == PROMPT  # sent, not continued


def _claim_and_give_back(store: Store, sid: str, epoch: int) -> None:
    claimed = store.write(lambda ctx: turns.begin_next(ctx, sid, epoch, collect=False))
    store.write(lambda ctx: turns.unclaim(ctx, sid, epoch, claimed, "no agent"))
