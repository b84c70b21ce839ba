"""The subagent bridge: how an agent's MCP tools reach the control plane.

Each session's agent gets an MCP server (``control_plane/mcp_server.py``, stdio, started by
the agent from ``session/new``'s ``mcpServers``). That server forwards every tool call over a
local Unix socket to this bridge, with the session id and a per-session secret.

Security: the secret is HMAC-SHA256(key, session id) with a random 32-byte key that lives in
this process's memory only: never on disk (an agent runs as the same user and can read any
file the control plane can) and never in the database. A restarted process has a new key,
and its agents are relaunched with the new secrets. A request with a missing or wrong secret
is refused. A session may only see and control its own descendants: every id a request names
is checked against that tree. Each process has a socket of its own (its pid in the name),
removed only by that process, so two processes on one store never take each other's tools
away. What the secret does not stop: a process of the same user that reads another
process's environment (``/proc/PID/environ`` of a session's MCP server) learns that
session's secret; run agents as another user where that matters.

Wire format: one JSON object per line each way. Request ``{"session", "secret", "op",
"args"}``; response ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import secrets
import sys
import tempfile
from typing import TYPE_CHECKING, Any

from actors.announce import status_of
from control_plane.agents import agent_from_command
from control_plane.bridge_wire import SECRET_ENV
from state_machines import ControlPlaneError, SessionState
from store import operations as ops

if TYPE_CHECKING:
    from control_plane.api import ControlPlane

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 1024 * 1024


class BridgeRefused(Exception):
    """A request the bridge will not carry out (bad secret, not a descendant, bad op)."""


def socket_path(store_path: str, pid: int | None = None) -> str:
    """This process's socket: next to the store when the path fits a Unix socket (108
    bytes), else in the temp dir; the pid keeps two processes on one store apart."""
    pid = os.getpid() if pid is None else pid
    beside = f"{store_path}.{pid}.sock"
    if len(beside.encode()) < 100:
        return beside
    digest = hashlib.sha256(store_path.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"acpctl-{digest}.{pid}.sock")


class SubagentBridge:
    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.key = secrets.token_bytes(32)  # this process's only: see the module docstring
        self.path = socket_path(cp.store.path)
        self._server: asyncio.AbstractServer | None = None

    def secret_for(self, session_id: str) -> str:
        return hmac.new(self.key, session_id.encode(), hashlib.sha256).hexdigest()

    def mcp_servers_for(self, session_id: str) -> list[dict[str, Any]]:
        """The ``mcpServers`` entry handed to the session's agent in ``session/new``."""
        return [
            {
                "name": "acp-control-plane",
                "command": sys.executable,
                "args": [
                    "-m",
                    "control_plane.mcp_server",
                    "--socket",
                    self.path,
                    "--session",
                    session_id,
                ],
                "env": [{"name": SECRET_ENV, "value": self.secret_for(session_id)}],
            }
        ]

    # -- lifecycle (on the protocol loop) ------------------------------------------------

    async def start(self) -> None:
        if os.path.exists(self.path):
            os.unlink(self.path)  # a socket left by a process that died
        self._server = await asyncio.start_unix_server(
            self._handle, path=self.path, limit=MAX_REQUEST_BYTES
        )
        os.chmod(self.path, 0o600)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        if os.path.exists(self.path):
            os.unlink(self.path)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                response = await self._answer(line)
                writer.write(json.dumps(response).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    async def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise BridgeRefused("a request must be a JSON object")
            result = await asyncio.to_thread(self.handle, request)
            return {"ok": True, "result": result}
        except (BridgeRefused, ControlPlaneError, ValueError, TimeoutError) as exc:
            return {"ok": False, "error": str(exc) or type(exc).__name__}

    # -- requests (worker threads) --------------------------------------------------------

    def handle(self, request: dict[str, Any]) -> Any:
        session_id = str(request.get("session") or "")
        given = str(request.get("secret") or "")
        if not session_id or not hmac.compare_digest(given, self.secret_for(session_id)):
            raise BridgeRefused("refused: missing or wrong session secret")
        args = request.get("args") or {}
        if not isinstance(args, dict):
            raise BridgeRefused("args must be an object")
        op = request.get("op")
        if op == "spawn_subagent":
            return self._spawn(session_id, args)
        if op == "list_subagents":
            return self._list(session_id)
        if op == "subagent_result":
            return self._result(session_id, args)
        if op == "send_to_subagent":
            return self._send(session_id, args)
        if op == "cancel_subagent":
            child = self._descendant(session_id, args)
            return {"id": child, "state": self.cp.cancel(child).value}
        raise BridgeRefused(f"unknown operation {op!r}")

    def _descendant(self, session_id: str, args: dict[str, Any]) -> str:
        child = str(args.get("id") or "")
        tree = self.cp.store.read(lambda c: ops.descendants(c, session_id))
        if child not in tree:
            raise BridgeRefused(f"refused: {child!r} is not a subagent of this session")
        return child

    def _spawn(self, session_id: str, args: dict[str, Any]) -> dict[str, Any]:
        task = str(args.get("task") or "").strip()
        if not task:
            raise BridgeRefused("spawn_subagent needs a task")
        parent = self.cp.get(session_id)
        agent = parent.agent
        if args.get("agent"):
            agent = agent_from_command(str(args["agent"]))
        mode = str(args.get("mode") or "run")
        spawned = self.cp.spawn(
            agent,
            parent.cwd,
            task,
            parent=session_id,
            mode=mode,
            idempotency_key=args.get("idempotencyKey"),
        )
        return {"id": spawned.session.id, "mode": mode, "state": spawned.session.state.value}

    def _list(self, session_id: str) -> list[dict[str, Any]]:
        tree = self.cp.store.read(lambda c: ops.descendants(c, session_id))
        listed = []
        for child_id in tree:
            child = self.cp.get(child_id)
            listed.append(
                {
                    "id": child.id,
                    "parentId": child.parent_id,
                    "state": child.state.value,
                    "mode": child.metadata.get("mode"),
                    "agent": child.agent.name,
                }
            )
        return listed

    def _result(self, session_id: str, args: dict[str, Any]) -> dict[str, Any]:
        child = self._descendant(session_id, args)
        commands = [c for c in self.cp.commands(child) if c.kind.value == "prompt"]
        if not commands:
            return {"id": child, "status": "none"}
        latest = commands[-1]
        wait = float(args.get("wait") or 0)
        outcome = self.cp.wait(latest.id, wait) if wait > 0 else self.cp.result(latest.id)
        if outcome is None:
            return {"id": child, "status": "running"}
        return {
            "id": child,
            "status": status_of(self.cp.command(latest.id)),
            "text": outcome.text,
            "stopReason": outcome.stop_reason,
            "error": outcome.error,
        }

    def _send(self, session_id: str, args: dict[str, Any]) -> dict[str, Any]:
        child = self._descendant(session_id, args)
        if self.cp.get(child).state is SessionState.CLOSED:
            raise BridgeRefused(
                f"subagent {child} is closed (mode=run subagents end after their run)"
            )
        command = self.cp.prompt(child, str(args.get("message") or ""))
        return {"id": child, "commandId": command.id}
