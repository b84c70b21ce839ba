"""What the example agent does in a turn, step by step, as its prompt's directives ask:
stream chunks, call tools and MCP tools, ask permission, read and write files through the
client, misbehave on purpose. The base of ``ExampleAgent`` (``agent.py``), which adds the
ACP methods and the sessions."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from acp import (
    RequestError,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
)
from acp.agent.connection import AgentSideConnection
from acp.schema import (
    AgentPlanUpdate,
    AllowedOutcome,
    Cost,
    PermissionOption,
    PlanEntry,
    SessionInfoUpdate,
    ToolCallUpdate,
    UsageUpdate,
)

from protocol.example_agent import mcp as example_agent_mcp
from protocol.example_agent.directives import (
    Directives,
    reply_chunks,
)
from protocol.example_agent.options import Options
from protocol.example_agent.state import (
    SessionRecord,
    append_invocation,
    utc_now,
)

log = logging.getLogger("example_agent")
STDERR_WRITE = 64 * 1024


@dataclass
class TurnState:
    """What one running prompt has produced so far (kept for usage and persistence)."""

    sent: list[str] = field(default_factory=list)
    cancel_requested: bool = False
    ignore_cancel: bool = False


class TurnScript:
    def __init__(self, options: Options, stdout: asyncio.StreamWriter | None = None) -> None:
        self.options = options
        self.mcp_servers: dict[str, list[Any]] = {}  # per session, from new/load/resume
        self.costs: dict[str, float] = {}  # per session: the cost #cost reported so far
        self._stdout = stdout
        self._conn: AgentSideConnection | None = None

    def on_connect(self, conn: AgentSideConnection) -> None:
        """Keep the connection: it is how the agent calls the client."""
        self._conn = conn

    @property
    def conn(self) -> AgentSideConnection:
        """The client connection (set by the SDK before any request arrives)."""
        if self._conn is None:
            raise RuntimeError("not connected")
        return self._conn

    async def _run_turn(
        self, record: SessionRecord, d: Directives, message: str, turn: TurnState
    ) -> None:
        """Apply the directives in their documented order, then stream the reply."""
        sid = record.session_id
        if d.think_ms:  # before anything, as a model thinking before its first token
            await asyncio.sleep(d.think_ms / 1000)
        if d.updates is None:
            await self._send(sid, update_agent_thought_text(f"Considering: {message}"))
        extras: list[str] = []
        if d.tool or d.permission:
            extras += await self._tool_call(sid, f"tool-{len(record.history) + 1}", d, message)
        extras += await self._file_ops(record, d)
        await self._notices(record, d)
        if d.hang or d.hang_hard:
            await asyncio.Event().wait()  # hang-hard: cancel() skips it via ignore_cancel
        if d.garbage:
            await self._write_stdout_raw(b"this is not json\n")
        if d.flood_stderr:
            _flood_stderr(d.flood_stderr)
        if d.oversize is not None:
            await self._chunk(sid, "x" * d.oversize, turn)
        if d.history:
            extras.append("history: " + " | ".join(t.message for t in record.history))
        if d.mcp_servers:
            names = [str(getattr(s, "name", "?")) for s in self.mcp_servers.get(sid, [])]
            extras.append("mcp servers: " + ", ".join(names))
        if d.mcp_calls:
            extras += await self._mcp_calls(sid, d.mcp_calls, d.mcp_as)
        await self._stream(sid, reply_chunks(d, message, extras), d, turn)

    async def _mcp_calls(
        self, sid: str, calls: list[tuple[str, dict[str, Any]]], impersonate: str | None
    ) -> list[str]:
        """Call MCP tools of the client's first usable server, each shown as a tool call."""
        http = self.options.http_mcp
        server = example_agent_mcp.usable_server(self.mcp_servers.get(sid, []), http)
        if server is None:
            return ["mcp: no MCP server was offered"]
        if impersonate is not None:
            server = example_agent_mcp.claiming(server, impersonate)
        results: list[str] = []
        try:
            await self._call_each(sid, server, calls, results)
        except Exception as exc:  # the server refused us or is gone: say so in the reply
            results.append(f"mcp: failed: {example_agent_mcp.reason(exc)}")
        return results

    async def _call_each(
        self, sid: str, server: Any, calls: list[tuple[str, dict[str, Any]]], results: list[str]
    ) -> None:
        async with example_agent_mcp.mcp_session(server) as session:
            for n, (tool, arguments) in enumerate(calls, start=1):
                call_id = f"mcp-{uuid.uuid4().hex[:8]}-{n}"
                await self._send(
                    sid,
                    start_tool_call(
                        call_id, tool, kind="other", status="in_progress", raw_input=arguments
                    ),
                )
                text = await example_agent_mcp.call(session, tool, arguments)
                failed = text.startswith("error:")
                await self._send(
                    sid,
                    update_tool_call(
                        call_id,
                        status="failed" if failed else "completed",
                        content=[tool_content(text_block(text))],
                    ),
                )
                results.append(f"{tool}: {text}")

    async def _tool_call(self, sid: str, tool_id: str, d: Directives, message: str) -> list[str]:
        """Ask permission first when requested, then report the tool call's life cycle."""
        extras: list[str] = []
        allowed = True
        if d.permission:
            outcome = await self._ask_permission(sid, tool_id, message)
            extras.append(f"permission: {outcome}")
            allowed = outcome == "allowed"
        await self._send(
            sid,
            start_tool_call(
                tool_id, "echo-tool", kind="read", status="pending", raw_input={"message": message}
            ),
        )
        if not allowed:
            await self._send(sid, update_tool_call(tool_id, status="failed"))
            return extras
        await self._send(sid, update_tool_call(tool_id, status="in_progress"))
        output = tool_content(text_block(f"tool output: {message}"))
        await self._send(sid, update_tool_call(tool_id, status="completed", content=[output]))
        return extras

    async def _ask_permission(self, sid: str, tool_id: str, message: str) -> str:
        """Return ``allowed``, ``rejected`` or ``cancelled`` (a client error counts as rejected)."""
        options = [
            PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
            PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
        ]
        call = ToolCallUpdate(
            tool_call_id=tool_id, title="echo-tool", kind="read", raw_input={"message": message}
        )
        try:
            reply = await self.conn.request_permission(
                session_id=sid, tool_call=call, options=options
            )
        except RequestError as exc:
            log.warning("request_permission failed: %s %s", exc.code, exc)
            return "rejected"
        if isinstance(reply.outcome, AllowedOutcome):
            return "allowed" if reply.outcome.option_id == "allow" else "rejected"
        return "cancelled"

    async def _file_ops(self, record: SessionRecord, d: Directives) -> list[str]:
        """Run the fs directives through the client; errors become reply text, not crashes."""
        extras: list[str] = []
        reads: list[tuple[str, int | None, int | None]] = []
        if d.read is not None:
            reads.append((d.read, None, None))
        if d.readlines is not None:
            reads.append(d.readlines)
        for path, line, limit in reads:
            try:
                got = await self.conn.read_text_file(
                    session_id=record.session_id, path=_abs(record, path), line=line, limit=limit
                )
                extras.append(f"read: {got.content}")
            except RequestError as exc:
                extras.append(f"read error: {exc.code} {exc}")
        if d.write is not None:
            path, content = d.write
            try:
                await self.conn.write_text_file(
                    session_id=record.session_id, path=_abs(record, path), content=content
                )
                extras.append(f"wrote: {path}")
            except RequestError as exc:
                extras.append(f"write error: {exc.code} {exc}")
        if d.edit is not None:
            extras.append(await self._edit(record, *d.edit))
        return extras

    async def _edit(self, record: SessionRecord, path: str, content: str) -> str:
        """``#edit``: the file read and written through the client, as an edit tool call
        whose content is the diff (what coding agents report for their edits)."""
        sid, target = record.session_id, _abs(record, path)
        tool_id = f"edit-{len(record.history) + 1}"
        await self._send(sid, start_tool_call(tool_id, f"Edit {path}", kind="edit"))
        try:
            old = (await self.conn.read_text_file(session_id=sid, path=target)).content
        except RequestError:
            old = None  # a new file
        try:
            await self.conn.write_text_file(session_id=sid, path=target, content=content)
        except RequestError as exc:
            await self._send(sid, update_tool_call(tool_id, status="failed"))
            return f"edit error: {exc.code} {exc}"
        diff = tool_diff_content(path, content, old)
        await self._send(sid, update_tool_call(tool_id, status="completed", content=[diff]))
        return f"edited: {path}"

    async def _notices(self, record: SessionRecord, d: Directives) -> None:
        """Send the plan, title and vendor-specific updates requested by directives."""
        sid = record.session_id
        if d.plan:
            entries = [
                PlanEntry(content="Read the message", priority="high", status="completed"),
                PlanEntry(content="Echo the message", priority="medium", status="in_progress"),
            ]
            await self._send(sid, AgentPlanUpdate(session_update="plan", entries=entries))
        if d.plan_steps:
            await self._plan_steps(sid, (d.delay_ms or 0) / 1000)
        if d.title is not None:
            record.title = d.title
            info = SessionInfoUpdate(
                session_update="session_info_update", title=d.title, updated_at=utc_now()
            )
            await self._send(sid, info)
        if d.unknown_update:
            # Raw engine call: the typed API would refuse an update kind the schema lacks.
            update = {"sessionUpdate": "vendor_example_kind", "vendor": {"n": 1}}
            await self.conn._conn.send_notification(
                "session/update", {"sessionId": sid, "update": update}
            )

    async def _plan_steps(self, sid: str, pause: float) -> None:
        """``#plan-steps``: a three-step plan, sent again as each step starts and ends (a
        plan update is the whole plan: the client replaces what it shows)."""
        steps = (("Read the code", "high"), ("Change it", "medium"), ("Run the tests", "low"))
        for done in range(len(steps) + 1):
            entries = [
                PlanEntry(
                    content=content,
                    priority=priority,
                    status="completed" if i < done else "in_progress" if i == done else "pending",
                )
                for i, (content, priority) in enumerate(steps)
            ]
            await self._send(sid, AgentPlanUpdate(session_update="plan", entries=entries))
            if pause and done < len(steps):
                await asyncio.sleep(pause)

    async def _stream(self, sid: str, chunks: list[str], d: Directives, turn: TurnState) -> None:
        """Send reply chunks, pausing between them; ``#crash`` dies after the first one."""
        delay = (d.delay_ms if d.delay_ms is not None else self.options.chunk_delay_ms) / 1000
        for index, chunk in enumerate(chunks):
            if index and delay:
                await asyncio.sleep(delay)
            if d.stamp:
                chunk = f"{chunk.rstrip()}@{time.monotonic_ns()} "
            await self._chunk(sid, chunk, turn)
            if d.cost_per_chunk is not None:
                await self._report_cost(sid, d.cost_per_chunk)
            if d.crash:
                await self._crash()
        if d.crash:  # an empty reply (e.g. #chunks=0) still crashes
            await self._crash()

    async def _report_cost(self, sid: str, cost: float) -> None:
        """``#cost=X``: the session's cumulative cost grows by X per chunk (this process's
        count), reported as ACP reports it, in a ``usage_update``."""
        total = self.costs[sid] = self.costs.get(sid, 0.0) + cost
        update = UsageUpdate(
            session_update="usage_update",
            used=0,
            size=200_000,
            cost=Cost(amount=round(total, 9), currency="USD"),
        )
        await self._send(sid, update)

    async def _crash(self) -> None:
        """Exit with code 3 at once (no cleanup), after the frames sent so far are out."""
        await self._flush_stdout()
        log.error("crashing as requested (#crash)")
        os._exit(3)

    async def _chunk(self, sid: str, text: str, turn: TurnState) -> None:
        """Send one agent_message_chunk and remember it (usage, persistence)."""
        await self._send(sid, update_agent_message_text(text))
        turn.sent.append(text)

    # ----- helpers ---------------------------------------------------------------------

    async def _send(self, sid: str, update: Any) -> None:
        """Send one typed session/update notification."""
        await self.conn.session_update(session_id=sid, update=update)

    async def _flush_stdout(self) -> None:
        """Wait until every frame handed to the pipe transport has reached the fd.

        The SDK resolves a send once ``drain()`` returns, which can leave bytes in the
        transport buffer; raw fd writes and ``os._exit`` must not overtake them.
        """
        if self._stdout is None:
            return
        while self._stdout.transport.get_write_buffer_size():
            await asyncio.sleep(0.001)

    async def _write_stdout_raw(self, data: bytes) -> None:
        """Write bytes straight to fd 1 between two frames (never inside one)."""
        await self._flush_stdout()
        os.write(1, data)

    def _record_invocation(self, sid: str, text: str) -> None:
        """Durably log the prompt before any update goes out (crash tests count these)."""
        log.info("prompt session=%s text=%r", sid, text[:200])
        if self.options.invocations_file is not None:
            entry = {"sessionId": sid, "message": text, "pid": os.getpid()}
            append_invocation(self.options.invocations_file, entry)


def _abs(record: SessionRecord, path: str) -> str:
    """ACP file paths must be absolute; resolve relative ones against the session cwd."""
    return path if os.path.isabs(path) else os.path.join(record.cwd, path)


def _flood_stderr(total: int) -> None:
    """Write ``total`` bytes to fd 2 in 64 KiB writes (clients must drain stderr)."""
    block = b"e" * STDERR_WRITE
    left = total
    while left > 0:
        left -= os.write(2, block[: min(left, STDERR_WRITE)])
