"""A backend agent's permission request, put to every client attached to the session that
may answer (control tokens): the first valid answer wins and the others are told the
request is resolved (``$/cancel_request``, as the TypeScript SDK's clients expect).

Each request is a row of the store (``permission_requests``): the first valid answer wins by a
compare-and-set there, so two clients answering at once cannot both win, and how each request
was decided (and by which token) is on record.

A request outlives its clients: when nobody is attached, or the last one leaves, it waits
and is put to the next client that attaches, until it is answered, the turn is cancelled
(the broker cancels the wait), or ``ask_timeout_s`` passes (then it is answered
``cancelled``, which the agent takes as a refusal).

Threads: ``ask`` is called on the control plane's protocol loop and hops to the server's
loop, where everything else here runs.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from acp.schema import PermissionOption, ToolCallUpdate

from control_plane.api import ControlPlane
from state_machines import ControlPlaneError

if TYPE_CHECKING:
    from control_plane.remote.connection import RemoteConnection

log = logging.getLogger("acpctl.remote")

REQUEST_ID_PREFIX = "acpctl-permission-"


@dataclass
class PendingPermission:
    request_id: str
    session_id: str
    params: dict[str, Any]
    valid_options: set[str]
    answer: asyncio.Future[str | None]
    asked: set[RemoteConnection] = field(default_factory=set)
    winner: RemoteConnection | None = None

    def message(self) -> dict[str, Any]:
        return {
            "jsonrpc": "2.0",
            "id": self.request_id,
            "method": "session/request_permission",
            "params": self.params,
        }


class PermissionRouter:
    def __init__(self, ask_timeout_s: float | None) -> None:
        self._cp: ControlPlane | None = None  # bound once the control plane is open
        self.ask_timeout_s = ask_timeout_s
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, set when it runs
        self._attached: dict[str, set[RemoteConnection]] = {}
        self._pending: dict[str, PendingPermission] = {}

    def bind(self, cp: ControlPlane) -> None:
        self._cp = cp

    # -- connections -------------------------------------------------------------------------

    def attach(self, session_id: str, conn: RemoteConnection) -> None:
        """``conn`` answers the session's requests from now on (and gets the pending ones)."""
        self._attached.setdefault(session_id, set()).add(conn)
        for pending in self._pending.values():
            if pending.session_id == session_id and conn not in pending.asked:
                self._put(pending, conn)

    def detach(self, conn: RemoteConnection) -> None:
        for conns in self._attached.values():
            conns.discard(conn)
        for pending in self._pending.values():
            pending.asked.discard(conn)

    def pending_for(self, session_id: str) -> list[str]:
        return [p.request_id for p in self._pending.values() if p.session_id == session_id]

    # -- the agent side (protocol loop) --------------------------------------------------------

    async def ask(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> str | None:
        """``session_id``: the control-plane session (its broker knows it: no store read)."""
        assert self.loop is not None and self._cp is not None
        params = {
            "sessionId": session_id,
            "toolCall": tool_call.model_dump(mode="json", by_alias=True, exclude_none=True),
            "options": [
                o.model_dump(mode="json", by_alias=True, exclude_none=True) for o in options
            ],
        }
        valid = {o.option_id for o in options}
        on_front = asyncio.run_coroutine_threadsafe(
            self._ask_clients(session_id, params, valid), self.loop
        )
        return await asyncio.wrap_future(on_front)

    async def _ask_clients(
        self, session_id: str, params: dict[str, Any], valid: set[str]
    ) -> str | None:
        assert self._cp is not None
        pending = PendingPermission(
            REQUEST_ID_PREFIX + uuid.uuid4().hex,
            session_id,
            params,
            valid,
            asyncio.get_running_loop().create_future(),
        )
        tool_call_id = params.get("toolCall", {}).get("toolCallId")
        title = params.get("toolCall", {}).get("title")
        try:
            await asyncio.to_thread(
                self._cp.open_permission_request,
                pending.request_id,
                session_id,
                tool_call_id,
                title if isinstance(title, str) else None,
            )
        except ControlPlaneError as exc:
            log.warning("permission request not recorded (%s): answered cancelled", exc)
            return None
        self._pending[pending.request_id] = pending
        for conn in list(self._attached.get(session_id, ())):
            self._put(pending, conn)
        decided = False
        try:
            async with asyncio.timeout(self.ask_timeout_s):
                answer = await pending.answer
            decided = True
            return answer
        except TimeoutError:
            withdrawn = await asyncio.to_thread(self._cp.withdraw_permission, pending.request_id)
            decided = True
            if not withdrawn:  # an answer won the race with the timeout: it stands
                return await pending.answer
            log.info("permission request %s timed out: answered cancelled", pending.request_id)
            return None
        finally:
            del self._pending[pending.request_id]
            self._withdraw(pending, answered_by=pending.winner)
            if not decided:  # the turn was cancelled (or the server stops): on record
                asyncio.get_running_loop().run_in_executor(
                    None, self._withdraw_quietly, pending.request_id
                )

    def _withdraw_quietly(self, request_id: str) -> None:
        assert self._cp is not None
        try:
            self._cp.withdraw_permission(request_id)
        except ControlPlaneError as exc:  # the store is closing or refuses: nothing waits
            log.info("permission request %s not withdrawn on record: %s", request_id, exc)

    # -- the client side (server loop) ---------------------------------------------------------

    async def answered(self, conn: RemoteConnection, message: dict[str, Any]) -> bool:
        """A client's response to one of our requests: whether it was one. The first valid
        answer wins by a compare-and-set in the store; a client whose answer lost, came
        late or was malformed is told the request is resolved (or ignored)."""
        request_id = message.get("id")
        if not isinstance(request_id, str) or not request_id.startswith(REQUEST_ID_PREFIX):
            return False
        pending = self._pending.get(request_id)
        if pending is None or pending.answer.done() or conn not in pending.asked:
            return True  # settled already (the client was told), or never put to it
        choice = _choice(message, pending.valid_options)
        if choice is _INVALID:
            log.info("permission answer to %s ignored: not a valid outcome", request_id)
            return True
        option = choice if isinstance(choice, str) else None
        assert self._cp is not None
        won = await asyncio.to_thread(
            self._cp.decide_permission, request_id, option, conn.token.name
        )
        if not won or pending.answer.done():
            if conn in pending.asked:  # it lost: tell it, once
                pending.asked.discard(conn)
                conn.send_notification(
                    pending.session_id, "$/cancel_request", {"requestId": request_id}
                )
            return True
        pending.winner = conn
        pending.answer.set_result(option)
        return True

    def _put(self, pending: PendingPermission, conn: RemoteConnection) -> None:
        if conn.may_answer_permissions:
            pending.asked.add(conn)
            conn.send_request(pending.session_id, pending.message())

    def _withdraw(self, pending: PendingPermission, answered_by: RemoteConnection | None) -> None:
        for conn in pending.asked:
            if conn is not answered_by:
                conn.send_notification(
                    pending.session_id, "$/cancel_request", {"requestId": pending.request_id}
                )
        pending.asked.clear()


_INVALID = object()


def _choice(message: dict[str, Any], valid: set[str]) -> object:
    """The option chosen, None for "cancelled", or ``_INVALID``."""
    result = message.get("result")
    if not isinstance(result, dict) or not isinstance(result.get("outcome"), dict):
        return _INVALID
    outcome = result["outcome"]
    if outcome.get("outcome") == "cancelled":
        return None
    if outcome.get("outcome") == "selected" and outcome.get("optionId") in valid:
        return outcome["optionId"]
    return _INVALID
