"""The narrow part of ``ControlPlane`` that the product's own front ends use: serve, batch
and the subagent bridge. Hosts may call these too; what they never get is the store, the
actors or the protocol loop themselves (``ControlPlane._store`` and friends are private).

Each method names one fact a front end needs, so a second store engine or a remote control
plane has a short list to implement, not the store's whole surface."""

from __future__ import annotations

from collections.abc import Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from acp.schema import InitializeResponse

from actors.session.agent_start import call_while_working
from actors.settings import RuntimeSettings
from actors.supervisor import Supervisor
from protocol.agent.connection import AgentConnection
from protocol.loop import ProtocolLoop
from state_machines import SessionState, StoreError
from store import AgentSpec, CommittedEvent, EventRecord, SessionRecord, Store, ops, queries
from store.feed import SessionWatch
from store.hashing import command_hash
from store.location import StoreLocation
from store.ops import budgets
from store.ops import permissions as permission_ops
from store.queries import permissions as permission_queries
from store.queries.permissions import PermissionRecord
from store.queries.search import SearchFilters, SearchHit
from store.search_query import SearchQuery
from store.tokens import TokenRecord
from store.usage import Budget, BudgetScope, BudgetStop, Usage
from store.watch import CommandWait

if TYPE_CHECKING:
    from actors.delivery.notifier import Notifier
    from control_plane.subagents.server import SubagentBridge

T = TypeVar("T")


def advertises_http_mcp(initialize_answer: dict[str, Any] | None) -> bool:
    """Whether an agent's ``initialize`` answer (as JSON) says it speaks HTTP MCP."""
    capabilities = (initialize_answer or {}).get("agentCapabilities") or {}
    return bool((capabilities.get("mcpCapabilities") or {}).get("http"))


@dataclass(frozen=True)
class RuntimeLevels:
    """What is true right now, for a metrics scrape (``control_plane/metrics.py``)."""

    running_turns: int  # turns holding one of max_running_turns' slots in this process
    waiting_turns: int  # sessions with work waiting for a slot
    live_sessions: int  # sessions with a live actor (and usually an agent) in this process
    store: queries.StoreLevels  # the store's: every process's sessions
    # Per [[notify]] hook this process delivers: (label, seconds its oldest pending event
    # has waited); docs/notify.md.
    notify_lag: tuple[tuple[str, float], ...] = ()


class FrontEndServices:
    _store: Store
    _loop: ProtocolLoop
    _supervisor: Supervisor
    _bridge: SubagentBridge | None
    _notifier: Notifier | None

    # -- configuration and wiring --------------------------------------------------------

    @property
    def settings(self) -> RuntimeSettings:
        """The runtime settings every session is launched with (read them; the in-memory
        registries in them, ``client_mcp`` and ``agent_profiles``, are meant to be used)."""
        return self._supervisor.settings

    @property
    def store_path(self) -> str:
        """The store's file, or its PostgreSQL URL with the password masked."""
        return self._store.path

    def resolve_agent(self, agent: AgentSpec | str | list[str] | tuple[str, ...]) -> AgentSpec:
        """A spec as given, else a name resolved as ``--agent`` is: the configuration's
        ``[agents.NAME]``, ``example``, a registry name (``claude``, ``codex``, ``gemini``...),
        else a command line (``UnknownAgent`` for a word that is none of them)."""
        from control_plane.agents import resolve_agent

        if isinstance(agent, AgentSpec):
            return agent
        return resolve_agent(agent, self.settings.configured_agents).spec

    def expect_http_tools(self) -> None:
        """Load the subagent tools' HTTP endpoint now, not at its first connection: an agent
        that speaks HTTP MCP is about to start a session (and may wait for the tools)."""
        if self._bridge is not None and self._bridge.http is not None:
            self._bridge.http.warm()

    def expect_http_tools_for(self, command: tuple[str, ...] | list[str]) -> None:
        """``expect_http_tools`` when the store knows the agent ``command`` speaks HTTP MCP
        (its recorded ``initialize`` answer says so); nothing for an agent never started."""
        if advertises_http_mcp(self.agent_capabilities(command)):
            self.expect_http_tools()

    @property
    def store_location(self) -> StoreLocation:
        return self._store.location

    def nodes(self) -> list[dict[str, Any]]:
        """The store's nodes that have not stopped: name, host, labels, running turns
        against capacity, lease left (docs/operations.md, "Running a fleet")."""
        return self._store.read(queries.node_views)

    def run_on_loop(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        """Run ``coro`` on the protocol loop (where agent connections live) and wait for
        it from this thread. Never call it from the loop itself."""
        return self._loop.call(coro, timeout)

    def start_agent_on_loop(self, conn: AgentConnection, label: str) -> InitializeResponse:
        """Start ``conn``'s agent (spawn + ``initialize``) on the protocol loop, with the
        patience a session's start has: ``timeouts.agent_start_s``, given again to an agent
        that keeps using CPU (``actors/session/agent_start.py``; a start on a busy host is
        slow, not hung). ``TimeoutError`` when it is hung or never done."""
        return cast(
            InitializeResponse,
            call_while_working(
                self._loop, conn.start(), self.settings.agent_start_timeout_s, conn, label
            ),
        )

    def token_by_digest(self, secret_sha256: str) -> TokenRecord | None:
        """The active access token whose secret has this digest (``control_plane/tokens.py``)."""
        return self._store.read(lambda c: queries.token_by_digest(c, secret_sha256))

    # -- permission requests of network clients (control_plane/remote/permissions.py) -------

    def open_permission_request(
        self,
        request_id: str,
        session_id: str,
        tool_call: dict[str, Any],
        options: list[dict[str, Any]],
    ) -> None:
        """On record, with a ``permission_requested`` event in the session's log that carries
        the request itself (what webhooks are told of, docs/notify.md, and what other nodes
        put to their clients)."""
        self._store.write(
            lambda ctx: permission_ops.open_request(ctx, request_id, session_id, tool_call, options)
        )

    def decide_permission(self, request_id: str, option_id: str | None, decided_by: str) -> bool:
        """Compare-and-set: record the answer if the request is still pending; whether it
        won (a second client's answer to the same request, on any node, does not). The
        winning write appends ``permission_settled`` and notifies the session's owner."""
        return self._store.write(
            lambda ctx: permission_ops.decide(ctx, request_id, option_id, decided_by)
        )

    def withdraw_permission(self, request_id: str) -> bool:
        return self._store.write(lambda ctx: permission_ops.withdraw(ctx, request_id))

    def permission_request(self, request_id: str) -> PermissionRecord | None:
        """A permission request put to network clients, as recorded: pending, answered
        (with the option and the token that chose it) or withdrawn."""
        return self._store.read(lambda c: permission_queries.permission_record(c, request_id))

    def permission_requests(self, request_ids: Collection[str]) -> list[PermissionRecord]:
        return self._store.read(lambda c: permission_queries.permission_records(c, request_ids))

    def pending_permissions(
        self, session_ids: Collection[str]
    ) -> list[tuple[PermissionRecord, dict[str, Any] | None]]:
        """The requests of these sessions still waiting, each with its request as put to
        clients (``{"toolCall", "options"}``; None if its event does not carry them)."""
        return self._store.read(lambda c: permission_queries.pending_permissions(c, session_ids))

    def permission_params(self, record: PermissionRecord) -> dict[str, Any] | None:
        return self._store.read(lambda c: permission_queries.permission_params(c, record))

    def store_fault(self, min_s: float) -> StoreError | None:
        """The store's refusal once every write has failed for ``min_s`` seconds (or at once
        for a damaged file); None while it takes writes."""
        return self._store.persistent_fault(min_s)

    def live_sessions(self) -> list[str]:
        """Ids of the sessions that have a live actor in this process now."""
        return self._supervisor.live_sessions()

    # -- reads ---------------------------------------------------------------------------

    def descendants(self, session_id: str) -> list[str]:
        """Every session below ``session_id``, parents before their children."""
        return self._store.read(lambda c: queries.descendants(c, session_id))

    def session_by_key(self, idempotency_key: str) -> SessionRecord | None:
        """The session a spawn with this idempotency key created, if any."""
        return self._store.session_by_key(idempotency_key)

    def session_for_acp(self, acp_session_id: str) -> str | None:
        """The session that holds this agent-side ACP session id."""
        return self._store.read(lambda c: queries.session_id_for_acp(c, acp_session_id))

    def command_events(self, session_id: str, command_id: str) -> list[EventRecord]:
        return self._store.command_events(session_id, command_id)

    def sessions_page(
        self,
        states: Sequence[SessionState] = (),
        before: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> tuple[list[SessionRecord], tuple[float, str] | None]:
        """Newest updated first, after the cursor ``before``; and the cursor of the next
        page (None after the last)."""
        return self._store.sessions_page(states, before, limit)

    def search(
        self, query: str, filters: SearchFilters | None = None, limit: int = 20
    ) -> list[SearchHit]:
        """Sessions whose prompts, answers or tool titles match ``query`` (words, "a
        phrase", prefix*), newest match first; ``SearchQueryError`` for a query without a
        word. The next page: ``filters.before`` = the last hit's ``doc_id``."""
        return self._store.search(SearchQuery.parse(query), filters or SearchFilters(), limit)

    def latest_event(self, session_id: str, kinds: tuple[str, ...]) -> EventRecord | None:
        return self._store.read(lambda c: queries.latest_event(c, session_id, kinds))

    def events_of_kinds(
        self, session_id: str, kinds: tuple[str, ...], after_seq: int = 0
    ) -> list[EventRecord]:
        return self._store.read(
            lambda c: queries.events_of_kinds_after(c, session_id, kinds, after_seq)
        )

    def usage(self, session_id: str, tree: bool = False) -> Usage:
        """What the session's agent reported it used (with ``tree``: the session and all its
        descendants together)."""
        return self._store.read(
            lambda c: queries.usage_sum(
                c, [session_id, *(queries.descendants(c, session_id) if tree else ())]
            )
        )

    def budget_stop(self, session_id: str) -> BudgetStop | None:
        """The budget that stopped the session, if one did."""
        self._store.get_session(session_id)  # SessionNotFound for unknown ids
        return self._store.read(lambda c: queries.session_usage(c, session_id)).stopped

    def apply_budget(
        self, scope: BudgetScope, budget: Budget, session_ids: Sequence[str]
    ) -> tuple[BudgetStop | None, list[str]]:
        """Check one budget over ``session_ids`` together (a batch's sessions): what was
        reached, if anything, and, for a stop budget, the sessions it just stopped (their
        queued prompts cancelled, their running turns told to cancel)."""
        scoped = budgets.ScopedBudget(scope, budget, tuple(session_ids))
        reached, stopped = self._store.write(lambda ctx: budgets.apply(ctx, scoped))
        for sid in stopped:
            self._store.cancel(sid)
            self._supervisor.cancel_turn(sid)
        return reached, stopped

    def levels(self) -> RuntimeLevels:
        """The runtime's levels now (a few reads of the store: for a scrape, not a loop)."""
        return RuntimeLevels(
            running_turns=self._supervisor.slots.running,
            waiting_turns=self._supervisor.slots.waiting,
            live_sessions=len(self._supervisor.live_sessions()),
            store=self._store.read(queries.store_levels),
            notify_lag=() if self._notifier is None else tuple(self._notifier.lag()),
        )

    def agent_capabilities(self, command: tuple[str, ...] | list[str]) -> dict[str, Any] | None:
        """What this agent command answered to ``initialize`` when it last started."""
        key = command_hash(command)
        return self._store.read(lambda c: queries.agent_capabilities(c, key))

    def record_agent_capabilities(self, command: Sequence[str], answer: dict[str, Any]) -> None:
        self._store.write(lambda ctx: ops.record_agent_capabilities(ctx, command, answer))

    # -- after-commit notifications (called on the store's writer thread: keep them short) --

    def watch_session(
        self,
        session_id: str,
        wake: Callable[[], None],
        keep: Callable[[CommittedEvent], bool] | None = None,
        finished: bool = True,
    ) -> SessionWatch:
        """A mailbox of each commit touching the session (its events and finished commands,
        store/feed.py): ``wake()`` when it stops being empty, ``take()`` to empty it,
        ``close()`` to stop; ``keep`` and ``finished`` say what is wanted."""
        return self._store.watch.session(session_id, wake, keep=keep, finished=finished)

    def watch_command(self, command_id: str) -> CommandWait:
        """The command's finished record from the commit that makes it final (open it
        before reading the command; ``close()`` or ``with`` when done)."""
        return self._store.watch.command(command_id)
