"""``acpctl attach URL SESSION``: a terminal client of ``serve --listen``. It replays the
session, then follows it live; a line on stdin is a prompt (a number answers a pending
permission request instead); it reconnects by itself after a drop, asking only for what
came after the last position it printed, so nothing is shown twice or skipped.

Prompts carry an idempotency key: one the server never answered is asked for again after a
reconnect with the same key, and the server runs it once (and says how it ended)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TextIO

import websockets
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from state_machines import ControlPlaneError

RECONNECT_ERRORS = (OSError, websockets.ConnectionClosed, websockets.InvalidHandshake)


class AttachRefused(ControlPlaneError):
    """The server refused the token or the session: reconnecting would not help."""


@dataclass
class AttachState:
    session_id: str
    position: int = 0  # the last event printed
    pending_prompts: dict[str, str] = field(default_factory=dict)  # key -> text, unanswered
    permissions: list[dict[str, Any]] = field(default_factory=list)  # unanswered requests


class Attach:
    def __init__(
        self,
        url: str,
        token: str,
        session_id: str,
        out: TextIO = sys.stdout,
        cwd: str = ".",
    ) -> None:
        self.url = url if url.startswith("ws") else "ws" + url.removeprefix("http")
        self.token = token
        self.state = AttachState(session_id)
        self.out = out
        self.cwd = cwd
        self._ids = itertools.count(1)
        self._answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ws: Any = None
        self._connected = asyncio.Event()
        self._stopping = False  # stdin ended: the end of the connection is ours
        self._tasks: set[asyncio.Task[None]] = set()

    # -- output ------------------------------------------------------------------------------

    def _print(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def _show_update(self, params: dict[str, Any]) -> None:
        update = params.get("update", {})
        position = (params.get("_meta") or {}).get("acpctl", {}).get("position")
        if isinstance(position, int):
            if position < self.state.position:
                return  # shown before a reconnect (the server sends only what is newer)
            self.state.position = position
        kind = update.get("sessionUpdate")
        content = update.get("content") or {}
        text = content.get("text", "") if isinstance(content, dict) else ""
        if kind == "agent_message_chunk":
            self._print(text)
        elif kind == "agent_thought_chunk":
            pass  # thoughts are not shown
        elif kind == "user_message_chunk":
            self._print(f"\n> {text}\n")
        elif kind in ("tool_call", "tool_call_update"):
            title = update.get("title") or update.get("toolCallId")
            status = update.get("status")
            if title or status:
                self._print(f"\n[tool] {title or ''} {status or ''}\n")

    def _show_permission(self, request: dict[str, Any]) -> None:
        params = request["params"]
        title = params.get("toolCall", {}).get("title") or "a tool call"
        lines = [f"\n[permission] {title}: answer with a number"]
        for number, option in enumerate(params.get("options", []), 1):
            lines.append(f"  {number}. {option.get('name')} ({option.get('kind')})")
        self._print("\n".join(lines) + "\n")

    # -- the connection ----------------------------------------------------------------------

    async def run(self, lines: asyncio.Queue[str | None]) -> None:
        typing = asyncio.create_task(self._type(lines))
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(RECONNECT_ERRORS),
                wait=wait_exponential(multiplier=0.2, max=5),
                reraise=True,
            ):
                with attempt:
                    await self._session()
                    return
        finally:
            typing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await typing

    async def _session(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        try:
            ws = await websockets.connect(self.url, additional_headers=headers, max_size=None)
        except websockets.InvalidStatus as exc:
            if exc.response.status_code in (401, 403, 404):
                raise AttachRefused(
                    f"the server refused: HTTP {exc.response.status_code}"
                ) from None
            raise
        async with ws:
            self._ws = ws
            reader = asyncio.create_task(self._read(ws))
            try:
                await self._request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
                load = {
                    "sessionId": self.state.session_id,
                    "cwd": self.cwd,
                    "mcpServers": [],
                    "_meta": {"acpctl": {"after": self.state.position}},
                }
                answer = await self._request("session/load", load)
                if "error" in answer:
                    raise AttachRefused(answer["error"].get("message", "session/load failed"))
                self._connected.set()
                for key, text in list(self.state.pending_prompts.items()):
                    self._spawn(self._prompt(text, key))  # asked again, with the same key
                try:
                    await reader
                except (ConnectionError, websockets.ConnectionClosed):
                    if not self._stopping:
                        raise
            finally:
                self._connected.clear()
                self._ws = None
                reader.cancel()
                for waiter in self._answers.values():
                    if not waiter.done():
                        waiter.set_exception(ConnectionError("disconnected"))
                self._answers.clear()

    async def _read(self, ws: Any) -> None:
        async for frame in ws:
            message = json.loads(frame)
            if "method" not in message:
                waiter = self._answers.pop(message.get("id"), None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(message)
            elif message["method"] == "session/update":
                self._show_update(message["params"])
            elif message["method"] == "session/request_permission":
                self.state.permissions.append(message)
                self._show_permission(message)
            elif message["method"] == "$/cancel_request":
                withdrawn = message["params"].get("requestId")
                self.state.permissions = [p for p in self.state.permissions if p["id"] != withdrawn]
        raise ConnectionError("the connection ended")

    async def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self._ids)
        waiter = asyncio.get_running_loop().create_future()
        self._answers[request_id] = waiter
        await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        answer: dict[str, Any] = await waiter
        return answer

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, message: dict[str, Any]) -> None:
        if self._ws is None:
            raise ConnectionError("not connected")
        await self._ws.send(json.dumps(message))

    # -- the person at the terminal ----------------------------------------------------------

    async def _type(self, lines: asyncio.Queue[str | None]) -> None:
        while (line := await lines.get()) is not None:
            line = line.strip()
            if not line:
                continue
            await self._connected.wait()
            if self.state.permissions and line.isdigit():
                await self._answer_permission(int(line))
            else:
                key = "attach-" + uuid.uuid4().hex
                self.state.pending_prompts[key] = line
                self._spawn(self._prompt(line, key))
        self._stopping = True
        while self.state.pending_prompts:  # stdin ended: let the prompts sent finish
            await asyncio.sleep(0.05)
        if self._ws is not None:
            await self._ws.close()

    async def _prompt(self, text: str, key: str) -> None:
        params = {
            "sessionId": self.state.session_id,
            "prompt": [{"type": "text", "text": text}],
            "_meta": {"idempotencyKey": key},
        }
        try:
            answer = await self._request("session/prompt", params)
        except ConnectionError:
            return  # asked again, with the same key, once reconnected
        self.state.pending_prompts.pop(key, None)
        if "error" in answer:
            self._print(f"\n[error] {answer['error'].get('message')}\n")
        else:
            self._print(f"\n[{answer['result'].get('stopReason')}]\n")

    async def _answer_permission(self, number: int) -> None:
        request = self.state.permissions[0]
        options = request["params"].get("options", [])
        if not 1 <= number <= len(options):
            self._print(f"[permission] pick 1 to {len(options)}\n")
            return
        self.state.permissions.pop(0)
        chosen = options[number - 1]["optionId"]
        await self._send(
            {
                "jsonrpc": "2.0",
                "id": request["id"],
                "result": {"outcome": {"outcome": "selected", "optionId": chosen}},
            }
        )


async def read_lines(source: TextIO, into: asyncio.Queue[str | None]) -> None:
    """Lines of ``source`` (stdin) into the queue, then None at its end."""
    readline: Callable[[], str] = source.readline
    while line := await asyncio.to_thread(readline):
        await into.put(line)
    await into.put(None)


async def attach(url: str, token: str, session_id: str) -> int:
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    client = Attach(url, token, session_id)
    reading = asyncio.create_task(read_lines(sys.stdin, lines))
    try:
        await client.run(lines)
    finally:
        reading.cancel()
    return 0
