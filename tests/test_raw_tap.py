"""The raw tap on its own, fed like the pipe protocol feeds it: chunks cut anywhere, data that
arrived before the tap was hooked, a last line without a newline, garbage."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from protocol.connection import AgentConnection, AgentLaunch
from protocol.permissions import Decision, PermissionBroker, PermissionPolicy


class ListRecorder:
    def __init__(self) -> None:
        self.frames: list[str] = []
        self.events: list[tuple[str, dict[str, Any]]] = []

    def update(self, frame: str, message: dict[str, Any]) -> None:
        assert json.loads(frame) == message  # the parse handed along is the frame's
        self.frames.append(frame)

    def event(self, kind: str, payload: dict[str, Any]) -> None:
        self.events.append((kind, payload))

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
        conn._hook_tap(source, sink)
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
        conn._hook_tap(source, sink)
        source.feed_data(_update(0) + b"\nnot json at all\n" + _update(1) + b"\n")
        source.feed_eof()
        return recorder, await _drain(sink)

    recorder, to_sdk = asyncio.run(run())
    assert [json.loads(f)["params"]["update"]["n"] for f in recorder.frames] == [0]
    assert [kind for kind, _ in recorder.events] == ["agent_protocol_error"]
    assert to_sdk == []
