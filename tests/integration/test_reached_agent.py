"""Whether a cut-off prompt reached its agent (store/ops/interrupted.py ``reached_agent``),
which decides between sending the prompt again and sending a continuation: only an update
that answers a prompt counts, not one the agent sends of its own accord (its slash
commands, which Claude Code sends after ``session/new`` and which can be recorded under the
prompt's command when it arrives after the prompt)."""

from __future__ import annotations

import json

import pytest

from store import CommandKind, NewEvent, Store
from store.ops.interrupted import reached_agent
from tests.conftest import AGENT

pytestmark = pytest.mark.backend_specific  # reads the stored frames on each backend


def _frame(kind: str, **fields: object) -> str:
    update = {"sessionUpdate": kind, **fields}
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": "a", "update": update},
        }
    )


def _reached(store: Store, frames: list[str]) -> bool:
    sid = store.spawn(AGENT, "/tmp").session.id
    content = [{"type": "text", "text": "x"}]
    command = store.enqueue(sid, CommandKind.PROMPT, {"content": content}).command
    if frames:
        store.append_events(sid, command.id, [NewEvent("session_update", f) for f in frames])
    return bool(store.write(lambda ctx: reached_agent(ctx, command)))


def test_only_an_update_that_answers_says_the_agent_had_the_prompt(store: Store) -> None:
    commands = _frame("available_commands_update", availableCommands=[])
    mode = _frame("current_mode_update", currentModeId="plan")
    chunk = _frame("agent_message_chunk", content={"type": "text", "text": "hi"})
    thought = _frame("agent_thought_chunk", content={"type": "text", "text": "hm"})
    assert _reached(store, []) is False
    assert _reached(store, [commands]) is False
    assert _reached(store, [commands, mode]) is False
    assert _reached(store, [commands, chunk]) is True
    assert _reached(store, [thought]) is True
    assert _reached(store, ['{"not": "a frame"}']) is True  # something came: counted
