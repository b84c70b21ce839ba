"""The raw tap on its own, fed like the pipe protocol feeds it: chunks cut anywhere, data that
arrived before the tap was hooked, a last line without a newline, garbage."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from protocol.agent.connection import AgentConnection
from protocol.agent.permissions import Decision, PermissionBroker, PermissionPolicy
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
