"""The client upstream of serve, as the backend agents see it: their permission requests and
file access, forwarded from the control plane's protocol loop to the client on serve's loop."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from acp.schema import (
    PermissionOption,
    ToolCallUpdate,
)

if TYPE_CHECKING:
    from control_plane.serve.agent import ServeAgent


class UpstreamClient:
    """Permission requests and file access of backend agents, forwarded to the client.
    Called on the control plane's protocol loop; the client lives on the front loop."""

    def __init__(self, front_loop: asyncio.AbstractEventLoop) -> None:
        self.agent: ServeAgent | None = None  # bound once the control plane is open
        self.front_loop = front_loop

    def serves_files(self) -> bool:
        return self.agent is not None and self.agent.client_fs

    async def _on_front(self, coro: Any) -> Any:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.front_loop))

    async def ask(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> str | None:
        """``session_id``: the control-plane session (its broker knows it: no store read)."""
        client = None if self.agent is None else self.agent.client
        if client is None:
            return None  # nobody to ask: the broker answers cancelled
        response = await self._on_front(
            client.request_permission(session_id=session_id, tool_call=tool_call, options=options)
        )
        outcome = response.outcome
        return getattr(outcome, "option_id", None)

    async def read_text_file(
        self, session_id: str, path: str, line: int | None, limit: int | None
    ) -> str:
        assert self.agent is not None and self.agent.client is not None
        response = await self._on_front(
            self.agent.client.read_text_file(
                session_id=session_id, path=path, line=line, limit=limit
            )
        )
        return str(response.content)

    async def write_text_file(self, session_id: str, path: str, content: str) -> None:
        assert self.agent is not None and self.agent.client is not None
        await self._on_front(
            self.agent.client.write_text_file(session_id=session_id, path=path, content=content)
        )
