"""MCP servers a client asked for (``mcpServers`` of ACP ``session/new``, ``load``, ``resume``),
handed to the session's agent at every launch, next to the control plane's own.

Their definitions are stored with the session so that a restart (also one no client
triggered) still offers them, but environment-variable and header *values* are secrets
(tokens): the store keeps their names only, the values live in this process's memory, filled
by the client's requests. A server whose values this process does not know is left out of a
launch (and logged), rather than started without its credentials; the client's next
``session/load`` or ``resume`` supplies them again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store import SpawnResult

log = logging.getLogger(__name__)

_SECRET_LISTS = ("env", "headers")  # [{"name", "value"}] in stdio and HTTP/SSE servers


def redacted(servers: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The definitions with every env and header value removed (what the store keeps)."""
    out = []
    for server in servers:
        copy = dict(server)
        for key in _SECRET_LISTS:
            if isinstance(copy.get(key), list):
                copy[key] = [{"name": item.get("name")} for item in copy[key]]
        out.append(copy)
    return out


def _has_secrets(server: dict[str, Any]) -> bool:
    return any(server.get(key) for key in _SECRET_LISTS)


class ClientMcpServers:
    """Per session: the full definitions (values included) the client sent to this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._full: dict[str, list[dict[str, Any]]] = {}

    def remember(self, session_id: str, servers: Sequence[Any]) -> None:
        plain = [_as_dict(s) for s in servers]
        with self._lock:
            if plain:
                self._full[session_id] = plain
            else:
                self._full.pop(session_id, None)

    def remembering(self, servers: Sequence[Any] | None) -> Callable[[SpawnResult], None] | None:
        """``remember`` for the session a spawn makes, to run in its transaction (None when
        there is nothing to remember)."""
        if not servers:
            return None
        return lambda spawned: self.remember(spawned.session.id, servers)

    def known(self, session_id: str) -> list[dict[str, Any]] | None:
        """The full definitions this process holds for the session (None: none)."""
        with self._lock:
            full = self._full.get(session_id)
        return None if full is None else [dict(s) for s in full]

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._full.pop(session_id, None)

    def for_launch(self, session_id: str, stored: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """What to hand the agent: the client's own definitions if this process has them,
        else the stored ones that need no secret."""
        full = self.known(session_id)
        if full is not None:
            return full
        usable = [dict(s) for s in stored if not _has_secrets(s)]
        skipped = [str(s.get("name")) for s in stored if _has_secrets(s)]
        if skipped:
            log.warning(
                "session %s: MCP servers %s left out until the client supplies their "
                "credentials again (session/load or session/resume)",
                session_id,
                ", ".join(skipped),
            )
        return usable


def _as_dict(server: Any) -> dict[str, Any]:
    if isinstance(server, dict):
        return dict(server)
    dumped = server.model_dump(by_alias=True, exclude_none=True)
    assert isinstance(dumped, dict)
    return dumped
