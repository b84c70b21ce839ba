"""What each module of ``control_plane/remote/`` needs of another, as small Protocols: the
permission router, the ACP agent of a connection and the access check name these, never the
classes behind them (``RemoteConnection``, ``Hub``), so each can be read, and tested, alone.

Run-time imports go one way (app -> hub -> connection -> agent, access, permissions); these
Protocols are what flows back against that direction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from control_plane.remote.frames import FrameCache, Frames
from store.tokens import TokenRecord


class PermissionClient(Protocol):
    """A connection as the permission router sees it: may it answer, who answers, and the
    way to send it a request or a notification."""

    @property
    def may_answer_permissions(self) -> bool: ...

    @property
    def answerer(self) -> str: ...  # the token's name: ``decided_by`` on record

    def send_request(self, session_id: str | None, message: dict[str, Any]) -> None: ...

    def send_notification(self, session_id: str, method: str, params: dict[str, Any]) -> None: ...


class PermissionDesk(Protocol):
    """The permission router as a connection sees it."""

    def attach(self, session_id: str, conn: PermissionClient) -> None: ...

    def detach(self, conn: PermissionClient) -> None: ...

    async def answered(self, conn: PermissionClient, message: dict[str, Any]) -> bool: ...

    def noticed(self, session_id: str, events: Sequence[Any]) -> None: ...


class FollowerConnection(Protocol):
    """A connection as its ACP agent sees it: the token, the shared frame cache, where a
    session's updates go, and the connection's say on when a new session's updates start."""

    @property
    def token(self) -> TokenRecord: ...

    @property
    def frames(self) -> FrameCache: ...

    @property
    def permissions(self) -> PermissionDesk: ...

    def send_updates(self, session_id: str, frames: Frames) -> None: ...

    def attached(self, session_id: str) -> None: ...

    def hold_until_answered(self, session_id: str) -> None: ...
