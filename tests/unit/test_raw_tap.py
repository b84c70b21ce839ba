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


def _tapped(
    coalesce_s: float, holding: bool = True
) -> tuple[RawTap, ListRecorder, asyncio.StreamReader, PipeTransport]:
    recorder = ListRecorder()
    tap = RawTap(recorder, 1 << 20, lambda _: None, coalesce_s, lambda: holding)
    source, sink = asyncio.StreamReader(), asyncio.StreamReader()
    pipe = PipeTransport()
    source.set_transport(pipe)
    tap.hook(source, sink)
    return tap, recorder, source, pipe


def test_updates_read_while_the_recorder_holds_leave_the_pipe_unread_at_most_the_cap() -> None:
    async def run() -> tuple[list[str], list[str], ListRecorder, int]:
        tap, recorder, source, pipe = _tapped(0.02)
        source.feed_data(b"\n".join([_update(0), _update(1), b""]))
        right_after = list(pipe.log)
        source.feed_data(_update(2) + b"\n")  # already buffered data of the same pause
        await asyncio.sleep(0.1)  # no write ended (no pull): the cap ends the pause
        return right_after, pipe.log, recorder, tap.pauses

    right_after, log, recorder, pauses = asyncio.run(run())
    assert right_after == ["pause"]
    assert pauses == 1  # the second read came while paused: no second timer
    assert log == ["pause", "resume"]
    assert [json.loads(f)["params"]["update"]["n"] for f in recorder.frames] == [0, 1, 2]


def test_no_pause_when_the_recorder_would_write_at_once() -> None:
    """Updates the recorder would write at once (it is idle: no write in flight, no
    interval to wait out) are never held back in the pipe."""

    async def run() -> list[str]:
        _, recorder, source, pipe = _tapped(0.02, holding=False)
        source.feed_data(b"\n".join([_update(0), _update(1), b""]))
        assert len(recorder.frames) == 2
        return pipe.log

    assert asyncio.run(run()) == []


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


def test_without_a_cap_or_on_a_closing_pipe_reading_never_pauses() -> None:
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
    5 ms cap (a recorder always holding) it reads them in a handful of bursts, and every frame
    arrives, in order."""
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


def test_a_pull_reads_what_came_during_the_pause_and_reading_goes_on() -> None:
    """The recorder's next event pulls: the updates waiting in the paused pipe are handed over
    right then, in order, an answer among them reaches the SDK, the pause ends (its cap's
    timer with it), and what the pull read starts no pause of its own."""
    response = b'{"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}'

    async def run() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        recorder = ListRecorder()
        tap = RawTap(recorder, 1 << 20, lambda _: None, 0.2, lambda: True)
        source, sink = asyncio.StreamReader(), asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(source), os.fdopen(read_fd, "rb", 0)
        )
        tap.hook(source, sink)
        seen: dict[str, Any] = {}
        try:
            os.write(write_fd, _update(0) + b"\n")
            while not recorder.frames:  # the transport's own read, then the pause
                await asyncio.sleep(0.001)
            os.write(write_fd, b"\n".join([_update(1), _update(2), b""]))
            await asyncio.sleep(0.05)  # paused: the loop does not read them
            seen["before"] = [json.loads(f)["params"]["update"]["n"] for f in recorder.frames]
            tap.pull()
            seen["after"] = [json.loads(f)["params"]["update"]["n"] for f in recorder.frames]
            seen["pauses"] = tap.pauses  # the pulled updates started no new pause
            os.write(write_fd, response + b"\n")  # read by the transport: not paused any more
            seen["answer"] = await asyncio.wait_for(sink.readline(), 1.0)
            await asyncio.sleep(0.3)  # past the cap: its timer was cancelled with the pause
            seen["reading"] = transport.is_reading()
            tap.pull()  # not paused: nothing happens
            return seen
        finally:
            os.close(write_fd)
            transport.close()

    seen = asyncio.run(run())
    assert seen["before"] == [0]
    assert seen["after"] == [0, 1, 2]
    assert seen["pauses"] == 1
    assert seen["answer"] == response + b"\n"
    assert seen["reading"]


def test_the_recorder_pulls_at_its_own_events_before_it_goes_on(tmp_path: Path) -> None:
    """When a write ends or the interval's timer fires the recorder pulls first, so what
    the tap left in the pipe goes
    with the next write, in order; ``holding`` is true while a write is in flight or the
    interval's timer is armed, and false once the recorder is idle."""
    from actors.session.recorder import StoreRecorder
    from protocol.loop import ProtocolLoop
    from store import AgentSpec, Store

    store = Store.open(str(tmp_path / "cp.db"))
    loop = ProtocolLoop()
    try:
        session_id = store.spawn(AgentSpec("a", ("true",)), str(tmp_path), None, None, None)
        recorder = StoreRecorder(store, session_id.session.id, loop, min_interval_s=0.05)
        pulls: list[int] = []
        holding: list[bool] = []

        def pull() -> None:  # what a tap would hand over from a paused pipe
            pulls.append(len(pulls))
            if len(pulls) == 1:
                recorder.updates([(_update(9).decode(), json.loads(_update(9)))])

        recorder.pull = pull

        async def stream() -> None:
            # 0 is written at once; 1 and 2 wait for that write, whose end pulls (9) and
            # leaves them to the interval's write, whose end pulls again.
            for i in range(3):
                recorder.updates([(_update(i).decode(), json.loads(_update(i)))])
                holding.append(recorder.holding)
            await asyncio.sleep(0.3)
            holding.append(recorder.holding)
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
    assert len(pulls) >= 2  # when the first write ended, and when the interval's ended
    assert holding == [True, True, True, False]
    assert written == [0, 1, 2, 9]  # what the pull handed over went in order, not lost


def test_a_tap_that_ends_during_a_pause_still_drains_the_pipe() -> None:
    """A pull that reads a frame over the limit ends the tap: the pause ends with it, so the
    pipe is read to its end (Python 3.11 wakes a process's ``wait()`` only then)."""

    async def run() -> tuple[list[str], bool, bool]:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        problems: list[str] = []
        tap = RawTap(ListRecorder(), 300, problems.append, 10.0, lambda: True)
        source, sink = asyncio.StreamReader(), asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(source)
        transport, _ = await loop.connect_read_pipe(lambda: protocol, os.fdopen(read_fd, "rb", 0))
        tap.hook(source, sink)
        try:
            os.write(write_fd, _update(0) + b"\n")
            while tap.pauses == 0:
                await asyncio.sleep(0.001)
            os.write(write_fd, b'{"x":"' + b"y" * 400 + b'"}\n')  # over the 300-byte limit
            tap.pull()
            reading = transport.is_reading()
            os.close(write_fd)  # the agent's end: seen although the tap has ended
            write_fd = -1
            await asyncio.wait_for(sink.read(), 1.0)
            for _ in range(100):
                if transport.is_closing():
                    break
                await asyncio.sleep(0.01)
            return problems, reading, transport.is_closing()
        finally:
            if write_fd != -1:
                os.close(write_fd)
            transport.close()

    problems, reading, closed = asyncio.run(run())
    assert problems == ["agent sent a frame over 300 bytes"]
    assert reading and closed


def test_a_read_with_an_answer_tells_the_recorder_before_its_frames() -> None:
    """A read that hands the SDK an answer (a response: no ``method``) calls
    ``answer_coming`` once, before that read's frames are handed over, so the recorder can
    hold them for the write the answer brings. A request of the agent's (it has a
    ``method``) or a read of updates alone does not."""
    response = b'{"jsonrpc":"2.0","id":7,"result":{"stopReason":"end_turn"}}'
    request = (
        b'{"jsonrpc":"2.0","id":3,"method":"session/request_permission","params":{"sessionId":"s"}}'
    )

    async def run() -> tuple[list[tuple[str, int | str]], list[bytes]]:
        recorder = ListRecorder()

        def answer_coming() -> None:
            recorder.calls.append(("answer", len(recorder.frames)))

        tap = RawTap(recorder, 1 << 20, lambda why: None, answer_coming=answer_coming)
        source, sink = asyncio.StreamReader(), asyncio.StreamReader()
        tap.hook(source, sink)
        source.feed_data(b"\n".join([_update(0), _update(1), b""]))  # updates alone
        source.feed_data(b"\n".join([_update(2), request, b""]))  # a request: no answer
        source.feed_data(b"\n".join([_update(3), _update(4), response, b""]))
        source.feed_data(b"\n".join([response, b""]))  # an answer alone: told, nothing handed
        source.feed_eof()
        return recorder.calls, await _drain(sink)

    calls, to_sdk = asyncio.run(run())
    assert calls == [
        ("updates", 2),
        ("updates", 1),
        ("answer", 3),  # before the two frames of its read
        ("updates", 2),
        ("answer", 5),
    ]
    assert to_sdk == [request + b"\n", response + b"\n", response + b"\n"]
