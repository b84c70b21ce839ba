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
- Process-level events (the agent exited, broke the protocol) go to every session.

Runs on the protocol loop only.
"""

from __future__ import annotations

import logging
from typing import Any

from protocol.agent.types import Recorder

log = logging.getLogger(__name__)

Frames = list[tuple[str, dict[str, Any]]]
MAX_HELD = 1000


class FrameRouter:
    def __init__(self, shared: bool) -> None:
        self.shared = shared
        self._by_acp_id: dict[str, Recorder] = {}
        self._sessions: list[Recorder] = []  # every attached session, with an id or not
        self._replaying: set[int] = set()  # id() of recorders whose load is replaying
        self._held: dict[str, Frames] = {}
        self._warned: set[str] = set()

    def attach(self, recorder: Recorder) -> None:
        self._sessions.append(recorder)

    def bind(self, acp_session_id: str, recorder: Recorder) -> None:
        """The session's ACP id is known: its frames (and those held for it) go to it."""
        self._by_acp_id[acp_session_id] = recorder
        held = self._held.pop(acp_session_id, None)
        if held and id(recorder) not in self._replaying:
            recorder.updates(held)

    def detach(self, recorder: Recorder) -> None:
        if recorder in self._sessions:
            self._sessions.remove(recorder)
        for acp_id in [k for k, r in self._by_acp_id.items() if r is recorder]:
            del self._by_acp_id[acp_id]
        self._replaying.discard(id(recorder))

    def replaying(self, recorder: Recorder, on: bool) -> None:
        if on:
            self._replaying.add(id(recorder))
        else:
            self._replaying.discard(id(recorder))

    # -- Recorder protocol, for the raw tap ----------------------------------------------

    def updates(self, frames: Frames) -> None:
        if not self.shared:
            if len(self._sessions) == 1 and id(self._sessions[0]) not in self._replaying:
                self._sessions[0].updates(frames)
            return
        runs: dict[int, tuple[Recorder, Frames]] = {}
        for frame in frames:
            acp_id = _session_id_of(frame[1])
            recorder = self._by_acp_id.get(acp_id) if acp_id is not None else None
            if recorder is None:
                self._hold(acp_id, frame)
            elif id(recorder) not in self._replaying:
                runs.setdefault(id(recorder), (recorder, []))[1].append(frame)
        for recorder, run in runs.values():
            recorder.updates(run)

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


def _session_id_of(frame: dict[str, Any]) -> str | None:
    try:
        value = frame["params"]["sessionId"]
    except (KeyError, TypeError):
        return None
    return value if isinstance(value, str) else None
