"""The raw tap: between an agent's stdout and the SDK's reader, it sees every line first.

Each ``session/update`` frame goes to the recorder verbatim, in wire order, handed over once
per read from the pipe (so the frames of one read are written together), and never to the
SDK (which would validate each into typed models in a task of its own only to drop it). A
frame over ``max_frame_bytes`` or a line that is not a JSON object ends the tap and is
reported through ``on_bad_frame`` (the connection records an ``agent_protocol_error`` and
stops the agent). Everything else reaches the SDK unchanged. Runs on the protocol loop,
inside the pipe's ``data_received``: it never raises there.

**Reads in step with the recorder.** An agent streams a turn one small write per update,
and the protocol loop, faster than the agent, would wake for each: one wake-up (a poll, a
read, the transport's callbacks) per update cost more of the loop than the update itself.
After a read that held nothing but ``session/update`` frames, while the session's recorder
is ``holding`` (a write in flight, or its interval's timer armed: updates handed over now
would wait for one of those anyway), the tap stops reading the pipe; what the agent writes
meanwhile waits there. The recorder's next event (the write's end, the timer) ``pull``s it:
one read of everything that came, and reading goes on. A pause lasts at most ``coalesce_s``
(``RuntimeSettings.read_coalesce_s``, default 1 ms), which bounds what an answer or a request
of the agent's arriving in it waits; a read with one in it never pauses.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

from protocol import json_codec
from protocol.agent.types import Recorder

log = logging.getLogger(__name__)

PULL_BYTES = 256 * 1024  # what the pipe transport reads at once (asyncio's max_size)


class RawTap:
    def __init__(
        self,
        recorder: Recorder,
        max_frame_bytes: int,
        on_bad_frame: Callable[[str], None],
        coalesce_s: float = 0.0,
        holding: Callable[[], bool] = lambda: True,
        answer_coming: Callable[[], None] = lambda: None,
    ) -> None:
        self._recorder = recorder
        self._max_frame_bytes = max_frame_bytes
        self._on_bad_frame = on_bad_frame
        self._coalesce_s = coalesce_s
        # The agent's stdout pipe, paused (at most ``coalesce_s``) while the recorders hold.
        self._transport: asyncio.ReadTransport | None = None
        self._holding = holding  # the recorders hold what is read now (worth pausing for)
        # Told before the frames of a read that also held an answer of the agent's (a
        # response to one of our requests, such as a turn's ``session/prompt``).
        self._answer_coming = answer_coming
        self._answered = False  # the read being tapped gave the SDK an answer
        self._paused: asyncio.TimerHandle | None = None  # the pause's end, while paused
        self._sink: asyncio.StreamReader | None = None
        self._passed = False  # the read being tapped gave the SDK a frame
        self._pulling = False
        self.pauses = 0  # how often reading paused (the tests count them)
        self._pending = bytearray()  # the partial line
        # session/update frames of the read being tapped, handed over at its end
        self._read_updates: list[tuple[str, dict[str, Any]]] = []
        self._done = False

    def hook(self, source: asyncio.StreamReader, sink: asyncio.StreamReader) -> None:
        """Run the tap inside ``source.feed_data``: the pipe protocol hands every chunk the
        agent wrote straight to it, and lines are split, checked and recorded right there,
        with no pump task woken (one event-loop round trip) per chunk. ``feed_data``,
        ``feed_eof`` and ``set_exception`` are replaced on this one reader object only;
        nothing reads ``source`` any more (the SDK reads ``sink``), so it never buffers."""
        original_eof, original_exception = source.feed_eof, source.set_exception
        self._sink = sink

        def feed_eof() -> None:
            self._end(sink)
            original_eof()

        def set_exception(exc: Exception) -> None:
            self._end(sink)
            original_exception(exc)

        def feed_data(data: bytes) -> None:
            self._chunk(data, sink)

        if self._coalesce_s > 0:
            transport = getattr(source, "_transport", None)
            if isinstance(transport, asyncio.ReadTransport):
                self._transport = transport
        source.feed_data = feed_data  # type: ignore[method-assign,assignment]
        source.feed_eof = feed_eof  # type: ignore[method-assign]
        source.set_exception = set_exception  # type: ignore[method-assign]
        # What arrived before the hook (normally nothing: the agent is still starting up).
        early: bytearray = getattr(source, "_buffer", bytearray())
        if early:
            data = bytes(early)
            early.clear()
            self._chunk(data, sink)
        if source.at_eof():
            self._end(sink)

    def _chunk(self, data: bytes, sink: asyncio.StreamReader) -> None:
        if self._done:
            return
        try:
            limit = self._max_frame_bytes
            pending, start = self._pending, 0
            while (end := data.find(b"\n", start)) != -1:
                if pending:
                    pending += data[start:end]
                    line = bytes(pending)
                    pending.clear()
                else:
                    line = data[start:end]
                start = end + 1
                if not self._take_line(line, sink):
                    self._close(sink)
                    return
            pending += data[start:]
            if len(pending) > limit:
                self._on_bad_frame(f"agent sent a frame over {limit} bytes")
                self._close(sink)
                return
            updates_only = bool(self._read_updates) and not self._passed
            self._passed = False
            if self._answered:
                # Before the hand-over: the recorders wait a moment for the write the answer
                # brings (a turn's outcome) instead of writing these frames without it.
                self._answered = False
                self._answer_coming()
            self.hand_over()
            # The transport is kept only when pausing is on: no recorder is asked otherwise.
            pausable = self._transport is not None and not self._pulling
            if updates_only and pausable and self._holding():
                self._pause()
        except Exception as exc:  # runs inside the pipe's data_received: never raise there
            log.exception("the raw tap failed")
            self._on_bad_frame(f"the raw tap failed: {exc}")
            self._close(sink)

    def _pause(self) -> None:
        """Leave the pipe unread until the recorder's next event (``pull``), at most
        ``coalesce_s``: the agent's next updates come in one read."""
        transport = self._transport
        if transport is None or self._paused is not None or transport.is_closing():
            return
        self.pauses += 1
        transport.pause_reading()
        self._paused = asyncio.get_running_loop().call_later(self._coalesce_s, self._end_pause)

    def pull(self) -> None:
        """A recorder's write ended or its timer fired: read now what the agent wrote
        during the pause, and end it (on the loop). The pipe's file descriptor is
        non-blocking, and reading it behind the paused transport keeps wire order, since
        every read of it runs on this loop. Nothing happens while not paused: the transport
        reads as soon as data comes."""
        transport, sink = self._transport, self._sink
        if self._paused is None or transport is None or sink is None:
            return
        self._end_pause()
        if self._done:
            return
        pipe = transport.get_extra_info("pipe")
        if pipe is None:
            return
        try:
            data = os.read(pipe.fileno(), PULL_BYTES)
        except (BlockingIOError, InterruptedError):
            return  # nothing written since the pause
        except (OSError, ValueError):
            return  # the transport's own read meets it (an error, a closed pipe) and ends
        if data:  # b"": the end of the pipe, which the transport reads once resumed
            # The recorder has not moved on from the event that pulled: no new pause for it.
            self._pulling = True
            try:
                self._chunk(data, sink)
            finally:
                self._pulling = False

    def _end_pause(self) -> None:
        """Read on: at the cap, at a pull, or when the tap ends. A tap that has ended still
        drains the pipe (it drops what comes): the agent's end of it must be read, or the
        process could not be waited for (asyncio wakes ``wait()`` once every pipe closed)."""
        if self._paused is None:
            return
        self._paused.cancel()
        self._paused = None
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.resume_reading()

    def _end(self, sink: asyncio.StreamReader) -> None:
        """The agent's stdout ended: a last line without a newline still counts."""
        if self._done:
            return
        if self._pending:
            self._take_line(bytes(self._pending), sink)
        self._close(sink)

    def hand_over(self) -> None:
        """The updates of the read so far to the recorder, in one call."""
        if self._read_updates:
            frames, self._read_updates = self._read_updates, []
            self._recorder.updates(frames)

    def _close(self, sink: asyncio.StreamReader) -> None:
        self.hand_over()
        self._done = True
        self._end_pause()
        self._pending.clear()
        sink.feed_eof()

    def _take_line(self, line: bytes, sink: asyncio.StreamReader) -> bool:
        if len(line) > self._max_frame_bytes:
            self._on_bad_frame(f"agent sent a frame over {self._max_frame_bytes} bytes")
            return False
        stripped = line.strip()
        if not stripped:
            return True
        if not stripped.startswith(b"{"):
            self._on_bad_frame(f"agent wrote a non-JSON line to stdout: {stripped[:120]!r}")
            return False
        if b'"session/update"' in stripped and self._take_update(stripped):
            return True
        self._passed = True
        if b'"method"' not in stripped:  # no method: an answer to one of our requests
            self._answered = True
        sink.feed_data(stripped + b"\n")
        return True

    def _take_update(self, line: bytes) -> bool:
        """Record a ``session/update`` notification; True when it was one. Such frames are
        not handed to the SDK: the control plane's only use for them is the verbatim record,
        and the SDK would validate each into typed models in a task of its own (the largest
        per-frame cost of a streaming turn) only for ``session_update`` to drop it."""
        try:
            frame = json_codec.loads(line)
        except ValueError:
            return False  # the SDK logs and skips it; there is nothing verbatim worth keeping
        if not (
            isinstance(frame, dict)
            and frame.get("method") == "session/update"
            and "id" not in frame
        ):
            return False
        self._read_updates.append((line.decode("utf-8", errors="replace"), frame))
        return True
