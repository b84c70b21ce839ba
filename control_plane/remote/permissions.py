"""A backend agent's permission request, put to every client that may answer it (control
tokens) on every node that follows the session: the first valid answer wins and the others
are told the request is settled (``$/cancel_request``, as the TypeScript SDK's clients expect).

Each request is a row of the store (``permission_requests``) written with a
``permission_requested`` event that carries the request itself; the first valid answer wins
by a compare-and-set on the row, written with a ``permission_settled`` event and a
notification of the session (store/ops/permissions.py). So, across nodes:

- The node that asks (its session's owner) holds a session watch while it waits; another
  node's winning answer reaches it as the ``permission_settled`` event (at once on
  PostgreSQL, by the notification), and the agent gets that answer.
- A node whose clients follow the session sees ``permission_requested`` in the session's
  feed and puts the request to its own clients (a *mirror*: same JSON-RPC id); their answer
  is decided in the store like any other.
- Every ``reread_s`` each node re-reads its requests' rows and the pending requests of the
  sessions its clients follow: the fallback for a lost notification, and on SQLite (several
  processes on one file, no notifications) the path another process's request and answer
  take, so either arrives within ``reread_s``.

A request outlives its clients: when nobody is attached, or the last one leaves, it waits
and is put to the next client that attaches, until it is answered (anywhere), the turn is
cancelled (the broker cancels the wait), or ``ask_timeout_s`` passes (then it is answered
``cancelled``, which the agent takes as a refusal).

Threads: ``ask`` is called on the control plane's protocol loop and hops to the server's
loop, where everything else here runs.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from acp.schema import PermissionOption, ToolCallUpdate

from control_plane.api import ControlPlane
from control_plane.remote.pending_permission import (
    INVALID,
    PendingPermission,
    answered_outcome,
    chosen_option,
    recorded_outcome,
    settled_outcome,
)
from control_plane.remote.permission_errors import (
    PermissionAlreadyAnswered,
    PermissionAnswerInvalid,
    PermissionNotFound,
)
from control_plane.remote.permission_watch import SettlementWatches, spawn
from control_plane.remote.roles import PermissionClient
from state_machines import ControlPlaneError, SessionClosed
from state_machines.event_kinds import EventKind
from store.ops.permissions import ANSWERED, PENDING
from store.queries.permissions import PermissionRecord, request_params

log = logging.getLogger("acpctl.remote")

REQUEST_ID_PREFIX = "acpctl-permission-"
CANCEL_REQUEST = "$/cancel_request"
# The re-read's period: on SQLite it is how another process's requests and answers arrive;
# on PostgreSQL notifications bring them at once and it only covers a lost one.
REREAD_S_SQLITE = 1.0
REREAD_S_POSTGRES = 5.0
DONE_KEPT = 10_000  # settled request ids remembered (a few hundred kilobytes)


class PermissionRouter:
    def __init__(self, ask_timeout_s: float | None, reread_s: float | None = None) -> None:
        self._cp: ControlPlane | None = None  # bound once the control plane is open
        self.ask_timeout_s = ask_timeout_s
        self.reread_s = reread_s  # None: by the store's kind, when bound
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, set when it runs
        self._attached: dict[str, set[PermissionClient]] = {}
        self._pending: dict[str, PendingPermission] = {}  # asked here, or mirrored
        self._watches = SettlementWatches(self.noticed)  # sessions with requests asked here
        self._tasks: set[asyncio.Task[None]] = set()
        self._looking: set[str] = set()  # requests seen in a feed, being looked up
        # Requests settled here lately: a read that began before the settlement may still
        # find one pending, and must not put it to clients again.
        self._done: OrderedDict[str, None] = OrderedDict()

    def bind(self, cp: ControlPlane) -> None:
        self._cp = cp
        if self.reread_s is None:
            postgres = cp.store_path.startswith("postgresql")
            self.reread_s = REREAD_S_POSTGRES if postgres else REREAD_S_SQLITE

    async def run(self) -> None:
        """The periodic re-read (a task of the server's, cancelled at shutdown)."""
        while True:
            await asyncio.sleep(self.reread_s or REREAD_S_SQLITE)
            try:
                await self._reread(set(self._pending), self._followed())
            except Exception as exc:  # the store refuses for now: the next round tries
                log.warning("re-reading permission requests failed: %s", exc)

    # -- connections -------------------------------------------------------------------------

    def attach(self, session_id: str, conn: PermissionClient) -> None:
        """``conn`` answers the session's requests from now on (and gets the pending ones,
        those asked on other nodes too: looked up at once)."""
        conns = self._attached.setdefault(session_id, set())
        first = not conns
        conns.add(conn)
        for pending in list(self._pending.values()):
            if pending.session_id == session_id and pending.recorded and conn not in pending.asked:
                self._put(pending, conn)
        if first:
            spawn(self._tasks, self._reread(set(), {session_id}))

    def detach(self, conn: PermissionClient) -> None:
        for session_id, conns in list(self._attached.items()):
            conns.discard(conn)
            if not conns:
                del self._attached[session_id]
        for pending in self._pending.values():
            pending.asked.discard(conn)

    def _followed(self) -> set[str]:
        return set(self._attached)

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
        on_front = asyncio.run_coroutine_threadsafe(
            self._ask_clients(session_id, params), self.loop
        )
        return await asyncio.wrap_future(on_front)

    async def _ask_clients(self, session_id: str, params: dict[str, Any]) -> str | None:
        assert self._cp is not None
        loop = asyncio.get_running_loop()
        pending = PendingPermission(
            REQUEST_ID_PREFIX + uuid.uuid4().hex, session_id, params, loop.create_future()
        )
        # Known before it is on record (the feed must not take it for another node's), and
        # watched before: no settlement can fall between the write and the watch.
        self._pending[pending.request_id] = pending
        try:
            await self._watches.open(self._cp, session_id)
            await asyncio.to_thread(
                self._cp.open_permission_request,
                pending.request_id,
                session_id,
                params["toolCall"],
                params["options"],
            )
        except ControlPlaneError as exc:
            del self._pending[pending.request_id]
            self._unwatch_if_idle(session_id)
            log.warning("permission request not recorded (%s): answered cancelled", exc)
            return None
        pending.recorded = True
        for conn in list(self._attached.get(session_id, ())):
            self._put(pending, conn)
        assert pending.answer is not None
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
                await self._reread({pending.request_id}, set())
                return await pending.answer
            pending.outcome = {"state": "withdrawn"}
            log.info("permission request %s timed out: answered cancelled", pending.request_id)
            return None
        finally:
            del self._pending[pending.request_id]
            self._forget(pending.request_id)
            self._unwatch_if_idle(session_id)
            if not decided:  # the turn was cancelled (or the server stops): on record
                pending.outcome = {"state": "withdrawn"}
                loop.run_in_executor(None, self._withdraw_quietly, pending.request_id)
            self._withdraw(pending)

    def _withdraw_quietly(self, request_id: str) -> None:
        assert self._cp is not None
        try:
            self._cp.withdraw_permission(request_id)
        except ControlPlaneError as exc:  # the store is closing or refuses: nothing waits
            log.info("permission request %s not withdrawn on record: %s", request_id, exc)

    def _unwatch_if_idle(self, session_id: str) -> None:
        if not any(
            p.session_id == session_id and p.answer is not None for p in self._pending.values()
        ):
            self._watches.close(session_id)

    # -- the log: requests and settlements of any node ---------------------------------------

    def noticed(self, session_id: str, events: Iterable[Any]) -> None:
        """Events of the session's log that a follow (or the watch) passed on, in order:
        another node's requests are put to this node's clients, settlements settle."""
        requested: dict[str, dict[str, Any]] = {}
        for event in events:
            if event.kind not in (EventKind.PERMISSION_REQUESTED, EventKind.PERMISSION_SETTLED):
                continue
            payload = event.payload
            request_id = payload.get("requestId")
            if not isinstance(request_id, str):
                continue
            if event.kind == EventKind.PERMISSION_REQUESTED:
                # Each follow of the session tells it: one look-up for all of them.
                if request_id not in self._pending and request_id not in self._looking:
                    requested[request_id] = payload
                continue
            requested.pop(request_id, None)
            pending = self._pending.get(request_id)
            if pending is not None and pending.recorded and not pending.deciding:
                self._settle(pending, settled_outcome(payload), None)
        if requested:
            spawn(self._tasks, self._mirror_if_pending(requested))

    async def _mirror_if_pending(self, payloads: dict[str, dict[str, Any]]) -> None:
        """Put another node's requests to this node's clients, those still pending only (a
        replay of an old log shows requests settled long ago)."""
        assert self._cp is not None
        self._looking |= payloads.keys()
        try:
            records = await asyncio.to_thread(self._cp.permission_requests, list(payloads))
        finally:
            self._looking -= payloads.keys()
        for record in records:
            params = request_params(payloads[record.id])
            if record.state == PENDING and params is not None:
                self._mirror(record, params)

    def _mirror(self, record: PermissionRecord, params: dict[str, Any]) -> None:
        known = record.id in self._pending or record.id in self._done
        if known or record.session_id not in self._attached:
            return
        pending = PendingPermission(
            record.id, record.session_id, {"sessionId": record.session_id, **params}, None
        )
        pending.recorded = True
        self._pending[record.id] = pending
        for conn in list(self._attached.get(record.session_id, ())):
            self._put(pending, conn)

    async def _reread(self, request_ids: set[str], session_ids: set[str]) -> None:
        """The store's word on these requests and on the pending requests of these sessions:
        what was settled elsewhere settles here, what another node asks is put here."""
        assert self._cp is not None
        cp = self._cp
        known = [i for i in request_ids if i in self._pending and self._pending[i].recorded]
        records = await asyncio.to_thread(cp.permission_requests, known) if known else []
        waiting = (
            await asyncio.to_thread(cp.pending_permissions, session_ids) if session_ids else []
        )
        for record in records:
            pending = self._pending.get(record.id)
            if record.state != PENDING and pending is not None and not pending.deciding:
                self._settle(pending, recorded_outcome(record), None)
        for record, params in waiting:
            if params is not None:
                self._mirror(record, params)
        for pending in list(self._pending.values()):  # nobody here follows it any more
            if pending.answer is None and pending.session_id not in self._attached:
                del self._pending[pending.request_id]

    # -- answers (server loop) -----------------------------------------------------------------

    async def answered(self, conn: PermissionClient, message: dict[str, Any]) -> bool:
        """A client's response to one of our requests: whether it was one. The first valid
        answer wins by a compare-and-set in the store; a client whose answer lost or came
        late is told the request is settled (``$/cancel_request``); a malformed one is
        ignored."""
        request_id = message.get("id")
        if not isinstance(request_id, str) or not request_id.startswith(REQUEST_ID_PREFIX):
            return False
        pending = self._pending.get(request_id)
        if pending is None or pending.outcome is not None or conn not in pending.asked:
            return True  # settled already (the client was told), or never put to it
        choice = chosen_option(message, pending.valid_options)
        if choice is INVALID:
            log.info("permission answer to %s ignored: not a valid outcome", request_id)
            return True
        option = choice if isinstance(choice, str) else None
        if await self._decide(pending, option, conn.answerer):
            self._settle(pending, answered_outcome(option, conn.answerer), conn)
            return True
        if conn in pending.asked:  # it lost: tell it, once
            pending.asked.discard(conn)
            meta = {"acpctl": {"reason": PermissionAlreadyAnswered.code}}
            params = {"requestId": request_id, "_meta": meta}
            conn.send_notification(pending.session_id, CANCEL_REQUEST, params)
        await self._reread({request_id}, set())  # how it was settled: the others are told
        return True

    async def answer(
        self, session_id: str, request_id: str, option_id: str | None, decided_by: str
    ) -> PermissionRecord:
        """An answer from outside ACP (the console's HTTP API), for a request asked on any
        node: the record once it won; ``PermissionNotFound``, ``PermissionAnswerInvalid``,
        or ``PermissionAlreadyAnswered`` (another answer won first, or it was withdrawn)."""
        assert self._cp is not None
        cp = self._cp
        record = await asyncio.to_thread(cp.permission_request, request_id)
        if record is None or record.session_id != session_id:
            raise PermissionNotFound(session_id, request_id)
        if record.state != PENDING:
            raise PermissionAlreadyAnswered(record)
        if option_id is not None:
            params = await asyncio.to_thread(cp.permission_params, record)
            valid = [str(o.get("optionId")) for o in (params or {}).get("options", [])]
            if option_id not in valid:
                raise PermissionAnswerInvalid(request_id, option_id, valid)
        won = await self._decide(self._pending.get(request_id) or request_id, option_id, decided_by)
        after = await asyncio.to_thread(cp.permission_request, request_id)
        assert after is not None  # rows are deleted only with their session (retention)
        if not won:
            raise PermissionAlreadyAnswered(after)
        pending = self._pending.get(request_id)
        if pending is not None:
            self._settle(pending, answered_outcome(option_id, decided_by), None)
        return after

    async def _decide(
        self, request: PendingPermission | str, option: str | None, decided_by: str
    ) -> bool:
        """The compare-and-set; ``request`` known here while it runs (``deciding``)."""
        assert self._cp is not None
        pending = request if isinstance(request, PendingPermission) else None
        request_id = request if isinstance(request, str) else request.request_id
        if pending is not None:
            pending.deciding += 1
        try:
            return await asyncio.to_thread(
                self._cp.decide_permission, request_id, option, decided_by
            )
        except SessionClosed:  # the session closed meanwhile: its requests are moot
            return False
        finally:
            if pending is not None:
                pending.deciding -= 1

    # -- settling ------------------------------------------------------------------------------

    def _settle(
        self, pending: PendingPermission, outcome: dict[str, Any], winner: PermissionClient | None
    ) -> None:
        """The request is settled: the agent gets the answer (a request asked here; the
        ask's end tells the clients), or this node's clients are told (a mirror)."""
        if pending.outcome is not None:
            return
        pending.outcome, pending.winner = outcome, winner
        self._forget(pending.request_id)
        if pending.answer is not None:
            if not pending.answer.done():
                answered = outcome.get("state") == ANSWERED
                pending.answer.set_result(outcome.get("optionId") if answered else None)
            return
        self._pending.pop(pending.request_id, None)
        self._withdraw(pending)

    def _forget(self, request_id: str) -> None:
        self._done[request_id] = None
        while len(self._done) > DONE_KEPT:
            self._done.popitem(last=False)

    def _put(self, pending: PendingPermission, conn: PermissionClient) -> None:
        if conn.may_answer_permissions:
            pending.asked.add(conn)
            conn.send_request(pending.session_id, pending.message())

    def _withdraw(self, pending: PendingPermission) -> None:
        """``$/cancel_request`` to every client asked but the winner, with how it was
        settled in ``_meta.acpctl`` (an addition the SDKs pass over)."""
        params: dict[str, Any] = {"requestId": pending.request_id}
        if pending.outcome is not None:
            params["_meta"] = {"acpctl": {"settled": pending.outcome}}
        for conn in pending.asked:
            if conn is not pending.winner:
                conn.send_notification(pending.session_id, CANCEL_REQUEST, params)
        pending.asked.clear()
