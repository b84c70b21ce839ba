"""The raw tap on its own, fed like the pipe protocol feeds it: chunks cut anywhere, data that
arrived before the tap was hooked, a last line without a newline, garbage."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from protocol.agent.connection import AgentConnection
from protocol.agent.permissions import Decision, PermissionBroker, PermissionPolicy
from protocol.agent.tap import RawTap
from protocol.agent.types import AgentLaunch


class ListRecorder:
    def __init__(self) -> None:
        self.frames: list[str] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.calls: list[tuple[str, int | str]] = []  # ("updates", count) / ("event", kind)

    def updates(self, frames: list[tuple[str, dict[str, Any]]]) -> None:
        assert frames  # never called with nothing
        self.calls.append(("updates", len(frames)))
        for frame, message in frames:
            assert json.loads(frame) == message  # the parse handed along is the frame's
            self.frames.append(frame)

    def event(self, kind: str, payload: dict[str, Any]) -> None:
        self.events.append((kind, payload))
        self.calls.append(("event", kind))

    async def flush(self) -> None:
        return None


def _update(i: int) -> bytes:
    body = {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "n": i}}
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": body}).encode()


def _connection(tmp: Path, recorder: ListRecorder) -> AgentConnection:
    launch = AgentLaunch(command=("true",), cwd=str(tmp), env={}, stderr_path=str(tmp / "e"))
    return AgentConnection(launch, recorder, PermissionBroker(PermissionPolicy(Decision.DENY)))


async def _drain(sink: asyncio.StreamReader) -> list[bytes]:
    lines = []
    while line := await sink.readline():
        lines.append(line)
    return lines


def test_chunks_cut_anywhere_and_early_data_keep_every_frame_in_order(tmp_path: Path) -> None:
    async def run() -> tuple[ListRecorder, list[bytes]]:
        recorder = ListRecorder()
        conn = _connection(tmp_path, recorder)
        source, sink = asyncio.StreamReader(), asyncio.StreamReader()
        response = b'{"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}'
        wire = b"\n".join([_update(0), _update(1), response, _update(2), _update(3)])
        source.feed_data(wire[:30])  # arrived before the tap was hooked
        conn._tap.hook(source, sink)
        for i in range(30, len(wire), 7):  # the rest in 7-byte pieces
            source.feed_data(wire[i : i + 7])
        source.feed_eof()  # the last frame has no newline: it still counts
        return recorder, await _drain(sink)

    recorder, to_sdk = asyncio.run(run())
    assert [json.loads(f)["params"]["update"]["n"] for f in recorder.frames] == [0, 1, 2, 3]
    assert to_sdk == [b'{"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}\n']


def test_garbage_ends_the_tap_with_a_protocol_error_event(tmp_path: Path) -> None:
    async def run() -> tuple[ListRecorder, list[bytes]]:
        recorder = ListRecorder()
        conn = _connection(tmp_path, recorder)
        source, sink = asyncio.StreamReader(), asyncio.StreamReader()
        conn._tap.hook(source, sink)
        source.feed_data(_update(0) + b"\nnot json at all\n" + _update(1) + b"\n")
        source.feed_eof()
        return recorder, await _drain(sink)

    recorder, to_sdk = asyncio.run(run())
    assert [json.loads(f)["params"]["update"]["n"] for f in recorder.frames] == [0]
    # The update read before the garbage is handed over before the error is recorded.
    assert recorder.calls == [("updates", 1), ("event", "agent_protocol_error")]
    assert to_sdk == []


def test_the_updates_of_one_read_are_handed_over_in_one_call(tmp_path: Path) -> None:
    """One hand-over per read from the pipe, so the recorder writes them as one group."""

    response = b'{"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}'

    async def run() -> tuple[ListRecorder, list[tuple[str, int | str]], list[bytes]]:
        recorder = ListRecorder()
        conn = _connection(tmp_path, recorder)
        source, sink = asyncio.StreamReader(), asyncio.StreamReader()
        conn._tap.hook(source, sink)
        source.feed_data(b"\n".join([_update(0), _update(1), _update(2), b""]))
        source.feed_data(b"\n".join([_update(3), response, _update(4), b""]))
        source.feed_data(_update(5)[:10])  # half a frame: nothing handed over for it yet
        calls_before_rest = list(recorder.calls)
        source.feed_data(_update(5)[10:] + b"\n")
        source.feed_eof()
        return recorder, calls_before_rest, await _drain(sink)

    recorder, calls_before_rest, to_sdk = asyncio.run(run())
    assert calls_before_rest == [("updates", 3), ("updates", 2)]
    assert recorder.calls == [("updates", 3), ("updates", 2), ("updates", 1)]
    assert to_sdk == [response + b"\n"]  # the response of the same read still reaches the SDK
    assert [json.loads(f)["params"]["update"]["n"] for f in recorder.frames] == list(range(6))


# -- reading in step with the stream (RawTap's coalesce_s) -----------------------------------


class PipeTransport(asyncio.ReadTransport):
    """What the tap sees of the agent's stdout pipe: its pauses and resumes, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []
        self.closing = False

    def pause_reading(self) -> None:
        self.log.append("pause")

    def resume_reading(self) -> None:
        self.log.append("resume")

    def is_closing(self) -> bool:
        return self.closing


def _tapped(coalesce_s: float) -> tuple[RawTap, ListRecorder, asyncio.StreamReader, PipeTransport]:
    recorder = ListRecorder()
    tap = RawTap(recorder, 1 << 20, lambda _: None, coalesce_s)
    source, sink = asyncio.StreamReader(), asyncio.StreamReader()
    pipe = PipeTransport()
    source.set_transport(pipe)
    tap.hook(source, sink)
    return tap, recorder, source, pipe


def test_a_read_of_updates_only_leaves_the_pipe_unread_for_the_window() -> None:
    async def run() -> tuple[list[str], list[str], ListRecorder, int]:
        tap, recorder, source, pipe = _tapped(0.02)
        source.feed_data(b"\n".join([_update(0), _update(1), b""]))
        right_after = list(pipe.log)
        source.feed_data(_update(2) + b"\n")  # already buffered data of the same pause
        await asyncio.sleep(0.1)
        return right_after, pipe.log, recorder, tap.pauses

    right_after, log, recorder, pauses = asyncio.run(run())
    assert right_after == ["pause"]
    assert pauses == 1
    # One pause for both reads (the second came while paused: no second timer), then resumed.
    assert log == ["pause", "resume"]
    assert [json.loads(f)["params"]["update"]["n"] for f in recorder.frames] == [0, 1, 2]


def test_a_read_with_an_answer_or_request_in_it_never_pauses() -> None:
    response = b'{"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}'
    request = b'{"jsonrpc":"2.0","id":7,"method":"fs/read_text_file","params":{}}'

    async def run() -> list[str]:
        _, recorder, source, pipe = _tapped(0.02)
        source.feed_data(b"\n".join([_update(0), response, b""]))
        source.feed_data(request + b"\n")
        source.feed_data(_update(1)[:20])  # half a frame: nothing handed over, no pause
        assert len(recorder.frames) == 1
        return pipe.log

    assert asyncio.run(run()) == []


def test_without_a_window_or_on_a_closing_pipe_reading_never_pauses() -> None:
    async def run() -> tuple[list[str], list[str]]:
        _, _, source, off = _tapped(0.0)
        source.feed_data(_update(0) + b"\n")
        _, _, closing_source, closing = _tapped(0.02)
        closing.closing = True
        closing_source.feed_data(_update(0) + b"\n")
        return off.log, closing.log

    assert asyncio.run(run()) == ([], [])


def test_a_streamed_turn_from_a_real_pipe_is_read_a_burst_at_a_time(tmp_path: Path) -> None:
    """A child process writes 200 updates one write each, 0.2 ms apart, like an agent
    streaming a turn. Without a window the loop reads nearly each write on its own; with a
    5 ms window it reads them in a handful of bursts, and every frame arrives, in order."""
    writer = tmp_path / "stream.py"
    frames = b"\n".join(_update(i) for i in range(200)).decode()
    writer.write_text(
        "import os, sys, time\n"
        f"frames = {frames!r}.split(chr(10))\n"
        "for frame in frames:\n"
        "    os.write(1, (frame + chr(10)).encode())\n"
        "    time.sleep(0.0002)\n"
    )

    async def reads(coalesce_s: float) -> tuple[int, ListRecorder]:
        recorder = ListRecorder()
        tap = RawTap(recorder, 1 << 20, lambda _: None, coalesce_s)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(writer), stdout=asyncio.subprocess.PIPE
        )
        assert proc.stdout is not None
        sink = asyncio.StreamReader()
        tap.hook(proc.stdout, sink)
        await proc.wait()
        await sink.readline()  # the tap ends the sink at the pipe's end
        return len(recorder.calls), recorder

    eager, eager_recorder = asyncio.run(reads(0.0))
    bursts, recorder = asyncio.run(reads(0.005))
    for got in (eager_recorder, recorder):
        assert [json.loads(f)["params"]["update"]["n"] for f in got.frames] == list(range(200))
    # 200 writes over at least 40 ms: 5 ms windows make at most a few dozen reads of them.
    assert bursts <= 40, (bursts, eager)
    assert bursts * 2 < eager, (bursts, eager)


def test_pull_reads_what_the_agent_wrote_during_a_pause_at_once() -> None:
    """A recorder about to write on its own pulls first: the updates waiting in a paused
    pipe are handed over right then, in order, and an answer among them reaches the SDK."""
    response = b'{"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}'

    async def run() -> tuple[list[int], int, list[int], bytes, bool]:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        recorder = ListRecorder()
        tap = RawTap(recorder, 1 << 20, lambda _: None, 10.0)  # a pause that outlasts the test
        source, sink = asyncio.StreamReader(), asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(source), os.fdopen(read_fd, "rb", 0)
        )
        tap.hook(source, sink)
        try:
            os.write(write_fd, _update(0) + b"\n")
            while not recorder.frames:  # the transport's own read, then the pause
                await asyncio.sleep(0.001)
            os.write(write_fd, b"\n".join([_update(1), _update(2), response, b""]))
            await asyncio.sleep(0.05)  # paused: the loop does not read them
            before = [json.loads(f)["params"]["update"]["n"] for f in recorder.frames]
            tap.pull()
            after = [json.loads(f)["params"]["update"]["n"] for f in recorder.frames]
            answer = await asyncio.wait_for(sink.readline(), 1.0)
            tap.pull()  # nothing more in the pipe: nothing happens
            return before, tap.pauses, after, answer, transport.is_closing()
        finally:
            os.close(write_fd)
            transport.close()

    before, pauses, after, answer, closing = asyncio.run(run())
    assert (before, pauses) == ([0], 1)
    assert after == [0, 1, 2]
    assert answer == response + b"\n"
    assert not closing


def test_a_recorder_pulls_before_the_writes_it_starts_on_its_own(tmp_path: Path) -> None:
    """The interval's write and the write chained after one ends both pull first; the
    connection gives its recorder the tap's pull while attached and takes it back after."""
    from actors.session.recorder import StoreRecorder
    from protocol.loop import ProtocolLoop
    from store import AgentSpec, Store

    store = Store.open(str(tmp_path / "cp.db"))
    loop = ProtocolLoop()
    try:
        session_id = store.spawn(AgentSpec("a", ("true",)), str(tmp_path), None, None, None)
        recorder = StoreRecorder(store, session_id.session.id, loop, min_interval_s=0.05)
        pulls: list[int] = []

        def pull() -> None:  # what a tap would hand over from a paused pipe
            pulls.append(len(pulls))
            if len(pulls) == 1:
                recorder.updates([(_update(9).decode(), json.loads(_update(9)))])

        recorder.pull = pull

        async def stream() -> None:
            # 0 is written at once; 1 and 2 wait for that write, which pulls (9) when it
            # ends and leaves them to the interval's timer, which pulls again.
            for i in range(3):
                recorder.updates([(_update(i).decode(), json.loads(_update(i)))])
            await asyncio.sleep(0.3)
            await recorder.flush()

        loop.call(stream(), 10.0)
        written = [
            e.payload["params"]["update"]["n"]
            for e in store.events(session_id.session.id)
            if e.kind == "session_update"
        ]
    finally:
        loop.stop()
        store.close()
    assert len(pulls) >= 2  # when the first write ended, and before the interval's write
    assert written == [0, 1, 2, 9]  # what the pull handed over went in order, not lost
