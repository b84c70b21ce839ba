"""A small ACP client for driving the real agents from tests with the Python ACP SDK."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from acp import (
    PROTOCOL_VERSION,
    Client,
    ReadTextFileResponse,
    RequestError,
    RequestPermissionResponse,
    WriteTextFileResponse,
    spawn_agent_process,
)
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
)

from .agents import AgentLaunch

__all__ = ["RecordingClient", "agent_connection", "message_text", "update_kinds"]


@dataclass
class RecordingClient:
    """Answers permission requests (allow by default), collects session updates and serves
    ``fs/read_text_file`` / ``fs/write_text_file`` with real files under ``root``."""

    root: Path
    allow: bool = True
    updates: list[Any] = field(default_factory=list)
    permission_requests: list[dict[str, Any]] = field(default_factory=list)
    fs_reads: list[str] = field(default_factory=list)
    fs_writes: list[str] = field(default_factory=list)
    init_seconds: float | None = None  # time the initialize request took

    def _confined(self, path: str) -> Path:
        p = Path(path)
        p = (self.root / p) if not p.is_absolute() else p
        p = p.resolve()
        if not p.is_relative_to(self.root.resolve()):
            raise RequestError.invalid_params({"path": path, "reason": "outside session cwd"})
        return p

    async def request_permission(
        self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any
    ) -> RequestPermissionResponse:
        self.permission_requests.append(
            {"session_id": session_id, "tool_call": tool_call, "options": options}
        )
        if not self.allow:
            reject = [o for o in options if o.kind.startswith("reject")]
            if reject:
                return RequestPermissionResponse(
                    outcome=AllowedOutcome(outcome="selected", option_id=reject[0].option_id)
                )
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        for kind in ("allow_once", "allow_always"):
            for o in options:
                if o.kind == kind:
                    return RequestPermissionResponse(
                        outcome=AllowedOutcome(outcome="selected", option_id=o.option_id)
                    )
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def read_text_file(
        self,
        path: str,
        session_id: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        self.fs_reads.append(path)
        p = self._confined(path)
        if not p.is_file():
            raise RequestError.resource_not_found(path)
        lines = p.read_text().splitlines(keepends=True)
        start = max(0, (line or 1) - 1)
        end = start + limit if limit else None
        return ReadTextFileResponse(content="".join(lines[start:end]))

    async def write_text_file(
        self, content: str, path: str, session_id: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        self.fs_writes.append(path)
        p = self._confined(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
        return WriteTextFileResponse()

    async def create_terminal(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/create")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Any) -> None:
        return None

    def clear(self) -> None:
        self.updates.clear()
        self.permission_requests.clear()
        self.fs_reads.clear()
        self.fs_writes.clear()


def update_kinds(updates: list[Any]) -> list[str]:
    return [u.session_update for u in updates]


def message_text(updates: list[Any]) -> str:
    """The concatenated text of all ``agent_message_chunk`` updates."""
    return "".join(
        getattr(u.content, "text", "") for u in updates if u.session_update == "agent_message_chunk"
    )


@asynccontextmanager
async def agent_connection(
    launch: AgentLaunch, client: RecordingClient, cwd: Path, *, initialize: bool = True
) -> AsyncIterator[tuple[ClientSideConnection, asyncio.subprocess.Process, Any]]:
    """Spawn the agent, optionally ``initialize`` it (advertising fs, no terminal) and yield
    ``(conn, process, initialize_response)``."""
    # RecordingClient is duck-typed: it answers only the callbacks the agents use, not the
    # whole acp.Client protocol, hence the cast.
    async with spawn_agent_process(
        cast(Client, client),
        launch.command,
        *launch.args,
        env=launch.env,
        cwd=cwd,
        transport_kwargs={"limit": 16 * 1024 * 1024},
    ) as (conn, proc):
        init = None
        if initialize:
            t0 = time.monotonic()
            init = await asyncio.wait_for(
                conn.initialize(
                    protocol_version=PROTOCOL_VERSION,
                    client_capabilities=ClientCapabilities(
                        fs=FileSystemCapabilities(read_text_file=True, write_text_file=True),
                        terminal=False,
                    ),
                    client_info=Implementation(name="acp-control-plane-tests", version="0"),
                ),
                60,
            )
            client.init_seconds = time.monotonic() - t0
        # On exit spawn_agent_process closes stdin, waits, then terminates/kills the agent.
        yield conn, proc, init
