"""A chatty ACP agent for the stderr log cap: ``python stderr_agent.py``.

A prompt ``BYTES PACE_MS TAG`` makes it write about BYTES of numbered lines to fd 2
(``stderr-agent TAG line N ...``, 1 KiB each, 64 KiB per write, PACE_MS between writes),
then ``stderr-agent TAG END``; its reply is one JSON object: its pid, the bytes written,
and the longest single write in milliseconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    run_agent,
    update_agent_message_text,
)
from acp.agent.connection import AgentSideConnection
from acp.schema import AgentCapabilities, Implementation

LINE = 1024
WRITE = 64 * 1024


def _line(tag: str, n: int) -> bytes:
    head = f"stderr-agent {tag} line {n:08d} ".encode()
    return head + b"x" * (LINE - len(head) - 1) + b"\n"


class StderrAgent:
    conn: AgentSideConnection

    def on_connect(self, conn: AgentSideConnection) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="stderr-agent", version="0.1.0"),
        )

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        return NewSessionResponse(session_id=uuid.uuid4().hex)

    async def cancel(self, session_id: str, **_: Any) -> None:
        return None

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        text = " ".join(getattr(block, "text", "") for block in prompt)
        total_s, pace_s, tag = text.split()
        total, pace = int(total_s), float(pace_s) / 1000
        written, n, slowest = 0, 0, 0.0
        while written < total:
            block = b"".join(_line(tag, n + i) for i in range(WRITE // LINE))
            n += WRITE // LINE
            started = time.monotonic()
            view = memoryview(block)
            while view:
                view = view[os.write(2, view) :]
            slowest = max(slowest, time.monotonic() - started)
            written += len(block)
            if pace:
                await asyncio.sleep(pace)
        end = f"stderr-agent {tag} END\n".encode()
        written += os.write(2, end)
        reply = {"pid": os.getpid(), "written": written, "maxWriteMs": slowest * 1000}
        await self.conn.session_update(
            session_id=session_id, update=update_agent_message_text(json.dumps(reply))
        )
        return PromptResponse(stop_reason="end_turn")


if __name__ == "__main__":
    asyncio.run(run_agent(StderrAgent()))  # type: ignore[arg-type]
