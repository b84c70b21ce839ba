"""Which session's recorder a ``session/update`` frame of an agent process goes to.

An agent process serves one session (the default) or several (a shared agent,
``actors/agent_pool.py``). The raw tap hands every read's frames here; each goes to the
recorder of the session its ``params.sessionId`` names, in wire order.

- A process with one session (not shared) sends everything to it, whatever id a frame names:
  exactly what a connection did before processes could be shared.
- Frames of a session id nobody has claimed yet are held, up to ``MAX_HELD`` per id, and
  handed over when the session attaches: an agent may send a session's first updates (its
  slash commands) before the ``session/new`` answer has been read by the SDK.
- A session whose ``session/load`` is replaying gets nothing: the store has that history.
  Some agents answer the load first and stream the replay after it (Gemini CLI 0.61.0 starts
  its ``streamHistory`` without awaiting it), so until the session's next prompt, conversation
  updates (messages, thoughts, tool calls, plans) are still taken as replay and dropped; other
  updates (slash commands, mode, config) pass. The first prompt after a load waits until no
  replayed frame came for ``REPLAY_QUIET_S`` (from the answer on), so that a replay still on
  its way is not taken for the new turn (:meth:`FrameRouter.replay_settled`). Of what a
  load replayed, the last user message is kept (:class:`ReplayedPrompts`): whether the restored
  conversation holds a prompt a crash cut off.
- Process-level events (the agent exited, broke the protocol) go to every session.

Runs on the protocol loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, cast

from protocol.agent.types import Pulling, Recorder
from state_machines.event_kinds import CONVERSATION_UPDATES

log = logging.getLogger(__name__)

Frames = list[tuple[str, dict[str, Any]]]
MAX_HELD = 1000
# The first prompt after a load waits for this long without a replayed frame (counted from
# the answer), and at most REPLAY_SETTLE_MAX_S in all: a replay is the agent writing what it
# has on disk, a matter of milliseconds, and a restore has just cost an agent start anyway.
REPLAY_QUIET_S = 0.25
REPLAY_SETTLE_MAX_S = 2.0


class ReplayedPrompts:
    """The last user message of a session's ``session/load`` replay (its consecutive
    ``user_message_chunk`` texts joined): what the restored conversation says the user
    asked last. A turn a crash cut off is continued only if the agent had its prompt
    (store/ops/interrupted.py), and an agent may have said nothing before the cut (Codex and
    Gemini CLI report nothing while a shell tool they may run runs): its replay still shows
    whether its saved conversation ends with that prompt. Only the last is kept: a long
    conversation's prompts would stay in memory for nothing."""

    def __init__(self) -> None:
        self.last: str | None = None
        self._open = False  # the last replayed frame was part of a user message

    def add(self, frames: Frames) -> None:
        for _, message in frames:
            kind = update_kind(message)
            if kind == "user_message_chunk":
                text = _chunk_text(message)
                if self._open and self.last is not None:
                    self.last += text
                else:
                    self.last, self._open = text, True
            elif kind in CONVERSATION_UPDATES:
                self._open = False


@dataclass
class _Trailing:
    """A session whose load was answered and that has not prompted since."""

    last: float  # monotonic time of the answer, then of the last replayed frame dropped
    dropped: int = 0


class FrameRouter:
    def __init__(self, shared: bool) -> None:
        self.shared = shared
        self._by_acp_id: dict[str, Recorder] = {}
        self._sessions: list[Recorder] = []  # every attached session, with an id or not
        # Whether every attached recorder is a ``Pulling`` one, decided at attach: a
        # runtime-checkable protocol's ``isinstance`` walks its members each time, and
        # ``holding`` is asked at every chunk the tap reads.
        self._all_pulling = True
        self._replaying: set[int] = set()  # id() of recorders whose load is replaying
        self._trailing: dict[int, _Trailing] = {}  # by id() of the recorder
        self._replayed: dict[int, ReplayedPrompts] = {}  # by id() of the recorder
        self._held: dict[str, Frames] = {}
        self._warned: set[str] = set()

    def attach(self, recorder: Recorder) -> None:
        self._sessions.append(recorder)
        self._all_pulling = all(isinstance(r, Pulling) for r in self._sessions)

    def bind(self, acp_session_id: str, recorder: Recorder) -> None:
        """The session's ACP id is known: its frames (and those held for it) go to it."""
        self._by_acp_id[acp_session_id] = recorder
        held = self._held.pop(acp_session_id, None)
        if held and id(recorder) not in self._replaying:
            recorder.updates(held)

    def detach(self, recorder: Recorder) -> None:
        if recorder in self._sessions:
            self._sessions.remove(recorder)
            self._all_pulling = all(isinstance(r, Pulling) for r in self._sessions)
        for acp_id in [k for k, r in self._by_acp_id.items() if r is recorder]:
            del self._by_acp_id[acp_id]
        self._replaying.discard(id(recorder))
        self._trailing.pop(id(recorder), None)
        self._replayed.pop(id(recorder), None)

    def replaying(self, recorder: Recorder, on: bool, loaded: bool = True) -> None:
        """The session's ``session/load`` was sent (``on``) or answered (off). After a
        successful answer (``loaded``), what may still trail of its replay is dropped until the
        next prompt; after an error there is no replay to trail, and the session goes on as a
        new one without waiting."""
        if on:
            self._replaying.add(id(recorder))
            self._replayed[id(recorder)] = ReplayedPrompts()
            return
        self._replaying.discard(id(recorder))
        if loaded:
            self._trailing[id(recorder)] = _Trailing(time.monotonic())

    async def replay_settled(self, recorder: Recorder) -> None:
        """Before the session's next prompt: a replay that trailed its load's answer has
        gone quiet, and from now on everything is this session's new conversation."""
        key = id(recorder)
        trailing = self._trailing.get(key)
        if trailing is None:
            return
        deadline = time.monotonic() + REPLAY_SETTLE_MAX_S
        while True:  # ``trailing.last`` moves on while a replayed frame arrives meanwhile
            wake_at = min(trailing.last + REPLAY_QUIET_S, deadline)
            now = time.monotonic()
            if now >= wake_at:
                break
            await asyncio.sleep(wake_at - now)
        if self._trailing.pop(key, None) is not None and trailing.dropped:
            log.info(
                "dropped %d session/load replay frames the agent sent after its answer",
                trailing.dropped,
            )

    def replayed(self, recorder: Recorder) -> ReplayedPrompts | None:
        """The last user message the session's last ``session/load`` replayed (None: it was not
        loaded). Complete once :meth:`replay_settled` has returned."""
        return self._replayed.get(id(recorder))

    def _dropped(self, recorder: Recorder, frames: Frames) -> None:
        """``frames`` of a replay, not recorded: only the last user message is kept."""
        replayed = self._replayed.get(id(recorder))
        if replayed is not None:
            replayed.add(frames)

    def _after_replay(self, recorder: Recorder, frames: Frames) -> Frames:
        """``frames`` without the replayed ones, for a session whose load was answered."""
        kept: Frames = []
        replay: Frames = []
        for frame in frames:
            (replay if update_kind(frame[1]) in CONVERSATION_UPDATES else kept).append(frame)
        if replay:
            self._dropped(recorder, replay)
            trailing = self._trailing[id(recorder)]
            trailing.last = time.monotonic()
            trailing.dropped += len(replay)
        return kept

    # -- Recorder protocol, for the raw tap ----------------------------------------------

    def updates(self, frames: Frames) -> None:
        if not self.shared:
            if len(self._sessions) != 1:
                return
            only = self._sessions[0]
            if id(only) in self._replaying:
                self._dropped(only, frames)
                return
            if self._trailing and id(only) in self._trailing:
                frames = self._after_replay(only, frames)
            if frames:
                only.updates(frames)
            return
        runs: dict[int, tuple[Recorder, Frames]] = {}
        for frame in frames:
            acp_id = _session_id_of(frame[1])
            recorder = self._by_acp_id.get(acp_id) if acp_id is not None else None
            if recorder is None:
                self._hold(acp_id, frame)
            elif id(recorder) in self._replaying:
                self._dropped(recorder, [frame])
            else:
                runs.setdefault(id(recorder), (recorder, []))[1].append(frame)
        for recorder, run in runs.values():
            if id(recorder) in self._trailing:
                run = self._after_replay(recorder, run)
            if run:
                recorder.updates(run)

    def holding(self) -> bool:
        """Every attached session's recorder holds what it is handed now until an event of
        its own (the raw tap's cue to pause reading)."""
        return (
            bool(self._sessions)
            and self._all_pulling
            and all(cast(Pulling, r).holding for r in self._sessions)
        )

    def answer_coming(self) -> None:
        """The agent's read held an answer (whose, the SDK knows, not the tap): every
        attached recorder that can wait for the write it may bring is told."""
        for recorder in self._sessions:
            wait = getattr(recorder, "answer_coming", None)
            if wait is not None:
                wait()

    def event(self, kind: str, payload: dict[str, Any]) -> None:
        for recorder in list(self._sessions):
            recorder.event(kind, payload)

    async def flush(self) -> None:  # the Recorder protocol's; each session flushes its own
        for recorder in list(self._sessions):
            await recorder.flush()

    def _hold(self, acp_id: str | None, frame: tuple[str, dict[str, Any]]) -> None:
        if acp_id is None:
            log.warning("a shared agent sent a session/update without a sessionId; dropped")
            return
        held = self._held.setdefault(acp_id, [])
        if len(held) < MAX_HELD:
            held.append(frame)
        elif acp_id not in self._warned:
            self._warned.add(acp_id)
            log.warning("updates for unknown ACP session %s beyond %d dropped", acp_id, MAX_HELD)


def update_kind(frame: dict[str, Any]) -> str | None:
    """A ``session/update`` frame's ``sessionUpdate`` kind, or None if it has none."""
    try:
        kind = frame["params"]["update"]["sessionUpdate"]
    except (KeyError, TypeError):
        return None
    return kind if isinstance(kind, str) else None


def _session_id_of(frame: dict[str, Any]) -> str | None:
    try:
        value = frame["params"]["sessionId"]
    except (KeyError, TypeError):
        return None
    return value if isinstance(value, str) else None


def _chunk_text(frame: dict[str, Any]) -> str:
    """The text of a message chunk's content block ("" for an image, a resource...)."""
    try:
        content = frame["params"]["update"]["content"]
    except (KeyError, TypeError):
        return ""
    text = content.get("text") if isinstance(content, dict) else None
    return text if isinstance(text, str) else ""
