"""Test clients and a real server for ``acpctl serve --listen``: the server as a subprocess
(so kill -9 is real), clients over real sockets on 127.0.0.1 (websockets; httpx for the
Streamable HTTP profile)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import websockets

from control_plane.tokens import create_token
from store import Store
from store.tokens import TokenAccess, TokenSessions

EXAMPLE = f"{sys.executable} -m protocol.example_agent"
PERMISSION_KINDS = {"allow": "allow_once", "reject": "reject_once"}


def make_token(
    db: str | Path,
    name: str,
    access: TokenAccess = TokenAccess.CONTROL,
    sessions: TokenSessions = TokenSessions.ALL,
) -> str:
    store = Store.open(db)
    try:
        return create_token(store, name, access, sessions)[1]
    finally:
        store.close()


class ListenServer:
    """``acpctl serve --listen 127.0.0.1:0`` in a subprocess on the store ``db`` (either
    backend; default a SQLite file in ``tmp``); ``url`` once it listens."""

    def __init__(self, tmp: Path, *extra: str, agent: str = EXAMPLE, db: str | None = None) -> None:
        self.tmp = tmp
        self.db = db if db is not None else str(tmp / "cp.db")
        self.extra = extra
        self.agent = agent
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.stderr_path = tmp / "serve-stderr.log"
        self.secret = ""  # a control token's, when the fixture made one

    def start(self, timeout: float = 60) -> ListenServer:
        argv = [sys.executable, "-m", "control_plane.cli", "--db", self.db, "serve"]
        argv += ["--listen", f"127.0.0.1:{self.port}", "--agent", self.agent, *self.extra]
        self._stderr = open(self.stderr_path, "ab")  # noqa: SIM115  # closed in stop()
        start_at = self.stderr_path.stat().st_size
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.stderr_path.read_bytes()[start_at:].decode(errors="replace")
            found = re.search(r"listening on https?://127\.0\.0\.1:(\d+)/acp", text)
            if found:
                self.port = int(found.group(1))  # a restart keeps the port
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve --listen exited {self.proc.returncode}: {text}")
            time.sleep(0.05)
        raise TimeoutError(f"serve --listen did not listen: {self.stderr()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/acp"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/acp"

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)
        self._stderr.close()

    def terminate(self, timeout: float = 60) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._stderr.close()
        return code

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        with contextlib.suppress(Exception):
            self._stderr.close()


@contextlib.contextmanager
def running_server(
    tmp: Path, *extra: str, token_name: str = "tests", db: str | None = None
) -> Iterator[ListenServer]:
    """A started ``serve --listen`` on ``db`` with a control token (``.secret``), stopped
    after."""
    server = ListenServer(tmp, *extra, db=db)
    tmp.mkdir(parents=True, exist_ok=True)
    server.secret = make_token(server.db, token_name)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class RpcClient:
    """What both transports share: request ids, answers by id, notifications kept in
    order, and permission requests answered by ``permission`` ("allow", "reject", or
    "ignore": never answered)."""

    def __init__(self, permission: str = "allow") -> None:
        self._ids = itertools.count(1)
        self.answers: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self.notifications: list[dict[str, Any]] = []
        self.permission_requests: list[dict[str, Any]] = []
        self.withdrawn: list[Any] = []
        self.cancels: list[dict[str, Any]] = []  # each $/cancel_request's params
        self.permission = permission
        self.changed = asyncio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    async def request(self, method: str, params: dict[str, Any], timeout: float = 60) -> Any:
        answer = await self.request_raw(method, params, timeout)
        if "error" in answer:
            raise RpcError(answer["error"])
        return answer["result"]

    async def request_raw(
        self, method: str, params: dict[str, Any], timeout: float = 60
    ) -> dict[str, Any]:
        request_id = next(self._ids)
        waiter = asyncio.get_running_loop().create_future()
        self.answers[request_id] = waiter
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return await asyncio.wait_for(waiter, timeout)

    async def received(self, message: dict[str, Any]) -> None:
        if "method" not in message:
            waiter = self.answers.pop(message.get("id"), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(message)
        elif message["method"] == "session/request_permission":
            self.permission_requests.append(message)
            if self.permission != "ignore":
                await self.answer_permission(message, self.permission)
        elif message["method"] == "$/cancel_request":
            self.withdrawn.append(message["params"]["requestId"])
            self.cancels.append(message["params"])
        elif "id" not in message:
            self.notifications.append(message)
        self.changed.set()

    def gone(self) -> None:
        """The connection ended: requests still waiting fail (as a real client's do)."""
        for waiter in self.answers.values():
            if not waiter.done():
                waiter.set_exception(ConnectionError("the connection closed"))
        self.changed.set()

    async def answer_permission(self, request: dict[str, Any], how: str) -> None:
        kind = PERMISSION_KINDS[how]
        option = next(o for o in request["params"]["options"] if o["kind"] == kind)
        await self.send(
            {
                "jsonrpc": "2.0",
                "id": request["id"],
                "result": {"outcome": {"outcome": "selected", "optionId": option["optionId"]}},
            }
        )

    async def wait_for(self, check: Callable[[], bool], timeout: float = 30) -> None:
        async with asyncio.timeout(timeout):
            while not check():
                self.changed.clear()
                await self.changed.wait()

    def updates(self, session_id: str) -> list[dict[str, Any]]:
        return [
            n["params"]
            for n in self.notifications
            if n["method"] == "session/update" and n["params"]["sessionId"] == session_id
        ]

    def positions(self, session_id: str) -> list[int]:
        return [u["_meta"]["acpctl"]["position"] for u in self.updates(session_id)]

    def text(self, session_id: str) -> str:
        return "".join(
            u["update"].get("content", {}).get("text", "")
            for u in self.updates(session_id)
            if u["update"].get("sessionUpdate") == "agent_message_chunk"
        )

    async def initialize(self) -> Any:
        return await self.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})

    async def new_session(self, cwd: str) -> str:
        result = await self.request("session/new", {"cwd": cwd, "mcpServers": []})
        return str(result["sessionId"])

    async def prompt(self, session_id: str, text: str, key: str | None = None) -> Any:
        params: dict[str, Any] = {
            "sessionId": session_id,
            "prompt": [{"type": "text", "text": text}],
        }
        if key is not None:
            params["_meta"] = {"idempotencyKey": key}
        return await self.request("session/prompt", params, timeout=120)

    async def load(self, session_id: str, cwd: str, after: int | None = None) -> Any:
        params: dict[str, Any] = {"sessionId": session_id, "cwd": cwd, "mcpServers": []}
        if after is not None:
            params["_meta"] = {"acpctl": {"after": after}}
        return await self.request("session/load", params)


class RpcError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        self.code = error.get("code")
        self.error = error
        super().__init__(f"{error.get('code')}: {error.get('message')}")


class WsClient(RpcClient):
    def __init__(self, ws: Any, permission: str = "allow") -> None:
        super().__init__(permission)
        self.ws = ws
        self.reader = asyncio.create_task(self._read())

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(message))

    async def send_text(self, text: str) -> None:
        await self.ws.send(text)

    async def _read(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for frame in self.ws:
                await self.received(json.loads(frame))
        self.gone()


@contextlib.asynccontextmanager
async def ws_client(
    url: str, secret: str | None, permission: str = "allow", **kwargs: Any
) -> AsyncIterator[WsClient]:
    headers = dict(kwargs.pop("additional_headers", {}))
    if secret is not None:
        headers["Authorization"] = f"Bearer {secret}"
    async with websockets.connect(
        url, additional_headers=headers, max_size=64 * 1024 * 1024, **kwargs
    ) as ws:
        client = WsClient(ws, permission)
        try:
            yield client
        finally:
            client.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await client.reader


class HttpClient(RpcClient):
    """The Streamable HTTP profile: POSTs, the connection's SSE stream, and one SSE stream
    per session opened with ``open_session_stream``."""

    def __init__(self, http: httpx.AsyncClient, url: str, secret: str, permission: str) -> None:
        super().__init__(permission)
        self.http = http
        self.url = url
        self.headers = {"Authorization": f"Bearer {secret}"}
        self.connection_id: str | None = None
        self.streams: list[asyncio.Task[None]] = []
        self.statuses: list[int] = []

    async def send(self, message: dict[str, Any]) -> None:
        headers = {**self.headers, "Content-Type": "application/json"}
        if self.connection_id is not None:
            headers["Acp-Connection-Id"] = self.connection_id
        params = message.get("params")
        if isinstance(params, dict) and "sessionId" in params:
            headers["Acp-Session-Id"] = params["sessionId"]
        response = await self.http.post(self.url, json=message, headers=headers)
        self.statuses.append(response.status_code)
        if message.get("method") == "initialize":
            self.connection_id = response.headers["acp-connection-id"]
            await self.received(response.json())
            self.streams.append(asyncio.create_task(self._stream(None)))
        elif response.status_code != 202:
            body = response.json()
            if "id" in message and "method" in message and "error" in body:
                await self.received(body)
            else:
                raise httpx.HTTPStatusError(
                    f"{response.status_code}", request=response.request, response=response
                )

    async def open_session_stream(self, session_id: str) -> None:
        opened = asyncio.get_running_loop().create_future()
        self.streams.append(asyncio.create_task(self._stream(session_id, opened)))
        await asyncio.wait_for(opened, 30)

    async def _stream(self, session_id: str | None, opened: Any = None) -> None:
        headers = {**self.headers, "Accept": "text/event-stream"}
        assert self.connection_id is not None
        headers["Acp-Connection-Id"] = self.connection_id
        if session_id is not None:
            headers["Acp-Session-Id"] = session_id
        async with self.http.stream("GET", self.url, headers=headers, timeout=None) as response:
            if opened is not None:
                opened.set_result(response.status_code)
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    await self.received(json.loads(line[6:]))
        if session_id is None:
            self.gone()
        self.changed.set()

    async def close(self) -> None:
        if self.connection_id is not None:
            await self.http.delete(
                self.url, headers={**self.headers, "Acp-Connection-Id": self.connection_id}
            )
        for task in self.streams:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


@contextlib.asynccontextmanager
async def http_client(
    url: str, secret: str, permission: str = "allow"
) -> AsyncIterator[HttpClient]:
    async with httpx.AsyncClient(timeout=60) as http:
        client = HttpClient(http, url, secret, permission)
        try:
            yield client
        finally:
            await client.close()
