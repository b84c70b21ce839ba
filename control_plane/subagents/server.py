"""The subagent bridge: where an agent's subagent tool calls are carried out.

Calls arrive two ways: over the control plane's own HTTP MCP endpoint (``http_tools.py``,
for agents that advertise ``mcpCapabilities.http``), or from the stdio MCP server process
(``mcp_server.py``, for the others) over a local Unix socket of this process. Either way the
caller is who the kernel says it is: the process at the other end must be the session's agent
or below it (``peers.py``); there is no secret to steal. A session may only see and control
its own descendants: every id a request names is checked against that tree. Each process
has a socket of its own (its pid in the name), removed only by that process, so two processes
on one store never take each other's tools away.

Wire format of the Unix socket: one JSON object per line each way. Request ``{"session",
"op", "args"}``; response ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``.

Limits (every agent may be hostile, and all sessions share this one bridge):

- Requests run on the bridge's own pool of ``BRIDGE_WORKERS`` (16) named threads
  (``cp-bridge_N``), never on the protocol loop's default executor (6 threads on a 2-core
  machine, shared with whatever else parks a blocking call there): a bridge request can
  never stall anything but other bridge requests. Each request's work is a few store reads
  or one spawn/prompt/cancel write, so 16 threads are far more than the store can keep busy,
  and few enough to cost nothing while idle.
- Per-session fairness: a session has at most ``PER_SESSION_IN_FLIGHT`` (2) requests on the
  pool at once (an ``asyncio.Semaphore`` per session id, taken on the loop before the work is
  handed to the pool, after the caller is checked, so only a session's own agent can use
  up its share). The rest of that session's requests queue on the loop, costing no thread;
  other sessions' requests go ahead. Two, not one: an agent that polls one child while it
  spawns or lists another is not serialised behind itself. With 16 workers, 8 sessions
  have to be saturating their share at once before a ninth waits for a thread, and then
  only for the length of a store read or write, since:
- ``subagent_result(wait=N)`` holds no thread while it waits. It reads the run's state on
  the pool, then parks on the loop until the commit that finishes the run hands over its
  record (``Store.watch``, no read) or ``WAIT_POLL_S`` passes, and reads again. So a tree of
  hostile sessions (a session may spawn children that run any command, each one caller of
  its own) cannot take the pool with waits either.
- ``wait`` must be a finite number >= 0 (JSON numbers only: no strings, no booleans, no
  NaN or Infinity); waits longer than ``MAX_WAIT_S`` (60 s) are cut to it. A wait that ends
  before the run does answers ``status: "running"`` (with ``waited`` and, when cut,
  ``capped: true``) so the agent calls again; it is not an error.
- Spawn keys (``idempotencyKey``) are stored as ``subagent:<parent id>:<key>``: a key an agent
  picks can never equal a key its host uses, nor another parent's key, while the same parent
  retrying the same key gets its first spawn. A key is a non-empty string of at most
  ``MAX_KEY_CHARS`` (200) characters.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import Counter

from control_plane.outcome import Outcome
from control_plane.subagents.host import SubagentHost
from control_plane.subagents.peers import AgentTrees, unix_peer_pid
from control_plane.subagents.rules import (
    BRIDGE_WORKERS,
    MAX_REQUEST_BYTES,
    STOP_GRACE_S,
    WAIT_POLL_S,
    BridgeRefused,
    _Share,
    parse_wait,
    spawn_key,
)
from protocol.tracing import traceparent_of
from state_machines import ControlPlaneError, SessionState

if TYPE_CHECKING:
    from control_plane.subagents.http_tools import HttpTools

log = logging.getLogger(__name__)

TOOL_CALLS = Counter(
    "acpctl_subagent_tool_calls_total",
    "Subagent tool calls, by transport (http: the control plane's MCP endpoint; stdio: through "
    "the MCP server process an agent without HTTP MCP starts) and outcome (ok; error: the "
    "bridge's answer was an error, a limit or a bad argument; refused: the caller is not the "
    "session's agent).",
    ["transport", "outcome"],
)

T = TypeVar("T")


class SubagentBridge:
    def __init__(self, cp: SubagentHost, trees: AgentTrees, path: str) -> None:
        self.cp = cp
        self.trees = trees  # whose agent tree each session is
        self.path = path  # this process's Unix socket
        self.http: HttpTools | None = None  # the HTTP endpoint, when agents are offered it
        self._server: asyncio.AbstractServer | None = None
        self._pool = ThreadPoolExecutor(BRIDGE_WORKERS, thread_name_prefix="cp-bridge")
        self._shares: dict[str, _Share] = {}  # on the loop only
        self._connections: set[asyncio.Task[None]] = set()
        self._busy = 0  # requests on the pool now (any thread; under _busy_lock)
        self._busy_lock = threading.Lock()

    # -- lifecycle (on the protocol loop) ------------------------------------------------

    async def start(self) -> None:
        if os.path.exists(self.path):
            os.unlink(self.path)  # a socket left by a process that died
        self._server = await asyncio.start_unix_server(
            self._handle, path=self.path, limit=MAX_REQUEST_BYTES
        )
        os.chmod(self.path, 0o600)

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.stop()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        # End every open connection (parked waits included), then let what is on the pool
        # finish for a moment without blocking the loop; what is still queued is dropped.
        connections = list(self._connections)
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
        deadline = asyncio.get_running_loop().time() + STOP_GRACE_S
        while self._busy and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        if os.path.exists(self.path):
            os.unlink(self.path)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        peer = unix_peer_pid(writer.get_extra_info("socket"))
        try:
            while line := await reader.readline():
                response = await self._answer(line, peer)
                writer.write(json.dumps(response).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        except asyncio.CancelledError:
            pass  # stop(): the bridge goes away, and with it this connection
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()

    async def _answer(self, line: bytes, peer: int | None) -> dict[str, Any]:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise BridgeRefused("a request must be a JSON object")
            session_id = request.get("session")
            if not isinstance(session_id, str) or not session_id:
                raise BridgeRefused("a request must name its session")
            if peer is None or not self.trees.holds(session_id, peer):
                raise self.refuse(session_id, f"pid {peer}", "stdio")
        except (BridgeRefused, ValueError) as exc:
            return {"ok": False, "error": str(exc)}
        return await self.serve(session_id, request.get("op"), request.get("args"), "stdio")

    def refuse(self, session_id: str, caller: str, transport: str) -> BridgeRefused:
        """The refusal of a caller that is not below the session's agent, logged (who asked
        for what; there is no credential to leave out)."""
        TOOL_CALLS.labels(transport, "refused").inc()
        log.warning(
            "subagent tools: refused a call for session %s from %s, which is not that "
            "session's agent",
            session_id,
            caller,
        )
        return BridgeRefused(f"refused: the caller is not session {session_id}'s agent")

    async def serve(self, session_id: str, op: Any, args: Any, transport: str) -> dict[str, Any]:
        """One tool call of ``session_id``, whose caller the transport has checked: the
        bridge's answer, ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": ...}``."""
        answer = await self._serve(session_id, op, args)
        TOOL_CALLS.labels(transport, "ok" if answer["ok"] else "error").inc()
        return answer

    async def _serve(self, session_id: str, op: Any, args: Any) -> dict[str, Any]:
        try:
            if not isinstance(args or {}, dict):
                raise BridgeRefused("args must be an object")
            if op not in OPS:
                raise BridgeRefused(f"unknown operation {op!r}")
            args = args or {}
            if op == "subagent_result":
                result = await self._result(session_id, args)
            else:
                result = await self._run(session_id, self._carry_out, session_id, op, args)
            return {"ok": True, "result": result}
        except (BridgeRefused, ControlPlaneError, ValueError, TimeoutError) as exc:
            return {"ok": False, "error": str(exc) or type(exc).__name__}
        except Exception as exc:  # a bug must not cost the agent its connection
            log.exception("subagent bridge request failed")
            return {"ok": False, "error": f"internal error: {type(exc).__name__}"}

    # -- scheduling (on the loop) ----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _share(self, session_id: str) -> AsyncIterator[None]:
        share = self._shares.get(session_id)
        if share is None:
            share = self._shares[session_id] = _Share()
        share.users += 1
        try:
            async with share.semaphore:
                yield
        finally:
            share.users -= 1
            if share.users == 0:
                del self._shares[session_id]

    async def _run(self, session_id: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the bridge's pool, within the session's share of it."""
        async with self._share(session_id):
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                self._pool, functools.partial(self._busy_call, fn, *args)
            )

    def _busy_call(self, fn: Callable[..., T], *args: Any) -> T:
        with self._busy_lock:
            self._busy += 1
        try:
            return fn(*args)
        finally:
            with self._busy_lock:
                self._busy -= 1

    async def _result(self, session_id: str, args: dict[str, Any]) -> dict[str, Any]:
        wait, capped = parse_wait(args.get("wait"))
        child, command_id = await self._run(session_id, self._latest_prompt, session_id, args)
        if command_id is None:
            return {"id": child, "status": "none"}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        # Opened before the first read: the commit that finishes the run hands its record
        # over (parked: no thread held); the read again after WAIT_POLL_S is for a run that
        # another process or node finishes.
        with self.cp.watch_command(command_id) as finished:
            answer = await self._run(session_id, self._outcome, child, command_id)
            while answer is None:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                record = await finished.result_async(min(remaining, WAIT_POLL_S))
                if record is not None:
                    answer = _answer(child, Outcome.of(record))
                else:
                    answer = await self._run(session_id, self._outcome, child, command_id)
        if answer is not None:
            return answer
        running: dict[str, Any] = {"id": child, "status": "running"}
        if wait > 0:
            running["waited"] = wait
        if capped:
            running["capped"] = True
        return running

    # -- requests (pool threads) ----------------------------------------------------------

    def _carry_out(self, session_id: str, op: str, args: dict[str, Any]) -> Any:
        if op == "spawn_subagent":
            return self._spawn(session_id, args)
        if op == "list_subagents":
            return self._list(session_id)
        if op == "send_to_subagent":
            return self._send(session_id, args)
        if op == "cancel_subagent":
            child = self._descendant(session_id, args)
            return {"id": child, "state": self.cp.cancel(child).value}
        raise BridgeRefused(f"unknown operation {op!r}")

    def _descendant(self, session_id: str, args: dict[str, Any]) -> str:
        child = str(args.get("id") or "")
        tree = self.cp.descendants(session_id)
        if child not in tree:
            raise BridgeRefused(f"refused: {child!r} is not a subagent of this session")
        return child

    def _spawn(self, session_id: str, args: dict[str, Any]) -> dict[str, Any]:
        task = str(args.get("task") or "").strip()
        if not task:
            raise BridgeRefused("spawn_subagent needs a task")
        key = spawn_key(session_id, args.get("idempotencyKey"))
        parent = self.cp.get(session_id)
        agent = parent.agent
        if args.get("agent"):
            agent = self.cp.resolve_agent(str(args["agent"]))
        mode = str(args.get("mode") or "run")
        # The child's turns link to the parent turn that spawned it (protocol/tracing.py).
        traceparent = traceparent_of(session_id)
        spawned = self.cp.spawn(
            agent,
            parent.cwd,
            task,
            parent=session_id,
            mode=mode,
            idempotency_key=key,
            metadata=None if traceparent is None else {"traceParent": traceparent},
        )
        return {"id": spawned.session.id, "mode": mode, "state": spawned.session.state.value}

    def _list(self, session_id: str) -> list[dict[str, Any]]:
        tree = self.cp.descendants(session_id)
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

    def _latest_prompt(self, session_id: str, args: dict[str, Any]) -> tuple[str, str | None]:
        """The descendant a ``subagent_result`` names and its latest prompt's id (None
        when it has none)."""
        child = self._descendant(session_id, args)
        commands = [c for c in self.cp.commands(child) if c.kind.value == "prompt"]
        return child, commands[-1].id if commands else None

    def _outcome(self, child: str, command_id: str) -> dict[str, Any] | None:
        """The run's answer once it is final, else None."""
        outcome = self.cp.result(command_id)
        return None if outcome is None else _answer(child, outcome)

    def _send(self, session_id: str, args: dict[str, Any]) -> dict[str, Any]:
        child = self._descendant(session_id, args)
        if self.cp.get(child).state is SessionState.CLOSED:
            raise BridgeRefused(
                f"subagent {child} is closed (mode=run subagents end after their run)"
            )
        command = self.cp.prompt(child, str(args.get("message") or ""))
        return {"id": child, "commandId": command.id}


OPS = frozenset(
    {"spawn_subagent", "list_subagents", "subagent_result", "send_to_subagent", "cancel_subagent"}
)


def _answer(child: str, outcome: Outcome) -> dict[str, Any]:
    """``subagent_result``'s answer for a finished run."""
    return {
        "id": child,
        "status": outcome.status.value,
        "text": outcome.text,
        "stopReason": outcome.stop_reason,
        "error": outcome.error,
    }
