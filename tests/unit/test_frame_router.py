"""The frame router after a ``session/load``: a replay that trails the load's answer (Gemini
CLI's way) is not recorded again, other updates pass, and the next prompt ends the window."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from protocol.agent import frame_router
from protocol.agent.frame_router import FrameRouter


class ListRecorder:
    def __init__(self) -> None:
        self.kinds: list[str] = []

    def updates(self, frames: list[tuple[str, dict[str, Any]]]) -> None:
        self.kinds.extend(f[1]["params"]["update"]["sessionUpdate"] for f in frames)

    def event(self, kind: str, payload: dict[str, Any]) -> None:
        return None

    async def flush(self) -> None:
        return None


def _frame(kind: str, acp_id: str = "s1") -> tuple[str, dict[str, Any]]:
    frame = {
        "method": "session/update",
        "params": {"sessionId": acp_id, "update": {"sessionUpdate": kind}},
    }
    return ("", frame)


CONVERSATION = ["user_message_chunk", "agent_message_chunk", "tool_call", "plan"]


@pytest.mark.parametrize("shared", [False, True])
def test_a_replay_trailing_the_load_answer_is_dropped_until_the_next_prompt(shared: bool) -> None:
    router = FrameRouter(shared)
    recorder = ListRecorder()
    router.attach(recorder)
    router.bind("s1", recorder)
    router.replaying(recorder, True)
    router.updates([_frame("user_message_chunk")])  # the replay before the answer
    router.replaying(recorder, False)
    # after the answer: the conversation kinds are replay, the rest is live
    router.updates([_frame(k) for k in CONVERSATION] + [_frame("available_commands_update")])
    assert recorder.kinds == ["available_commands_update"]

    asyncio.run(router.replay_settled(recorder))  # the next prompt
    router.updates([_frame("agent_message_chunk")])
    assert recorder.kinds == ["available_commands_update", "agent_message_chunk"]


def test_the_next_prompt_waits_until_the_replay_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frame_router, "REPLAY_QUIET_S", 0.2)
    router = FrameRouter(False)
    recorder = ListRecorder()
    router.attach(recorder)

    async def run() -> float:
        router.replaying(recorder, True)
        router.replaying(recorder, False)
        loop = asyncio.get_running_loop()
        for delay in (0.1, 0.2):  # replayed frames keep coming for a while
            loop.call_later(delay, router.updates, [_frame("agent_message_chunk")])
        started = time.monotonic()
        await router.replay_settled(recorder)
        return time.monotonic() - started

    waited = asyncio.run(run())
    assert waited >= 0.2 + 0.2 - 0.02  # quiet for REPLAY_QUIET_S after the last one
    assert recorder.kinds == []
    router.updates([_frame("agent_message_chunk")])
    assert recorder.kinds == ["agent_message_chunk"]


def test_a_session_that_never_loaded_prompts_without_waiting() -> None:
    router = FrameRouter(False)
    recorder = ListRecorder()
    router.attach(recorder)
    started = time.monotonic()
    asyncio.run(router.replay_settled(recorder))
    assert time.monotonic() - started < frame_router.REPLAY_QUIET_S
    router.updates([_frame("agent_message_chunk")])
    assert recorder.kinds == ["agent_message_chunk"]


@pytest.mark.parametrize("shared", [False, True])
def test_a_failed_load_leaves_no_window_for_the_new_session(shared: bool) -> None:
    """The agent refused the load (the session goes on as a new one): nothing of a replay can
    trail, so its first prompt neither waits nor loses its updates."""
    router = FrameRouter(shared)
    recorder = ListRecorder()
    router.attach(recorder)
    router.bind("s1", recorder)
    router.replaying(recorder, True)
    router.replaying(recorder, False, loaded=False)
    router.updates([_frame("agent_message_chunk")])
    assert recorder.kinds == ["agent_message_chunk"]
    started = time.monotonic()
    asyncio.run(router.replay_settled(recorder))
    assert time.monotonic() - started < frame_router.REPLAY_QUIET_S


class HoldingRecorder(ListRecorder):
    """A recorder the tap reads in step with (``Pulling``): ``holding`` as set."""

    def __init__(self, holding: bool) -> None:
        super().__init__()
        self.holding = holding
        self.pull: Any = None


def test_the_router_holds_only_while_every_session_s_recorder_holds() -> None:
    """The raw tap pauses reading only when nothing it could read would be written sooner:
    a session whose recorder would write at once, or one that is not ``Pulling``, says no."""
    router = FrameRouter(shared=True)
    assert not router.holding()  # no session at all
    busy, idle = HoldingRecorder(True), HoldingRecorder(False)
    router.attach(busy)
    assert router.holding()
    router.attach(idle)
    assert not router.holding()
    idle.holding = True
    assert router.holding()
    router.attach(ListRecorder())  # not Pulling: never paused for
    assert not router.holding()


class AnswerWaiting(ListRecorder):
    def __init__(self) -> None:
        super().__init__()
        self.told = 0

    def answer_coming(self) -> None:
        self.told += 1


@pytest.mark.parametrize("shared", [False, True])
def test_an_answer_is_told_to_every_attached_recorder_that_waits_for_one(shared: bool) -> None:
    """The tap cannot tell whose answer a response is (the SDK matches its id): on a shared
    agent every attached session's recorder hears it; one without ``answer_coming`` is
    skipped, and a detached one hears nothing more."""
    router = FrameRouter(shared)
    first, second, plain = AnswerWaiting(), AnswerWaiting(), ListRecorder()
    for recorder in (first, second, plain):
        router.attach(recorder)
    router.answer_coming()
    router.detach(second)
    router.answer_coming()
    assert (first.told, second.told) == (2, 1)


def _text(kind: str, text: str) -> tuple[str, dict[str, Any]]:
    raw, frame = _frame(kind)
    frame["params"]["update"]["content"] = {"type": "text", "text": text}
    return raw, frame


@pytest.mark.parametrize("shared", [False, True])
def test_the_replay_s_last_user_message_is_kept_before_and_after_the_answer(shared: bool) -> None:
    """What a load replayed is not recorded, but its last user message is kept (consecutive
    chunks joined): whether the restored conversation ends with a cut-off prompt."""
    router = FrameRouter(shared)
    recorder = ListRecorder()
    router.attach(recorder)
    router.bind("s1", recorder)
    assert router.replayed(recorder) is None  # not loaded
    router.replaying(recorder, True)
    router.updates([_text("user_message_chunk", "first "), _text("user_message_chunk", "ask")])
    router.updates([_text("agent_message_chunk", "done"), _frame("tool_call")])
    router.replaying(recorder, False)
    # trailing the answer (Gemini CLI's way), with a live slash-commands update among them
    router.updates([_text("user_message_chunk", "second ask"), _frame("available_commands_update")])
    asyncio.run(router.replay_settled(recorder))
    replayed = router.replayed(recorder)
    assert replayed is not None
    assert replayed.last == "second ask"  # a message of its own, not glued to the first
    assert recorder.kinds == ["available_commands_update"]
    router.detach(recorder)
    assert router.replayed(recorder) is None
