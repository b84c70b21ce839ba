"""``ControlPlane``: the synchronous public API; ``open`` runs the whole machine.

Thread-safe: any thread may call any method. Writes return once durable (group commit).
Opening runs recovery, resumes deliveries from their checkpoints, and hands sessions with
work to the supervisor, which runs them as actors against their agents.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from actors.client_mcp import redacted as redacted_mcp_servers
from actors.delivery.service import DeliveryService
from actors.settings import RuntimeSettings
from actors.supervisor import Supervisor
from control_plane import forking
from control_plane.assembly import assemble
from control_plane.content import PromptInput, prompt_blocks
from control_plane.host_reads import HostReads
from control_plane.import_api import TranscriptImports
from control_plane.subagents.server import SubagentBridge
from control_plane.waiting import Waiters
from protocol.loop import ProtocolLoop
from state_machines import QueueMode, SessionState
from store import (
    AgentSpec,
    BindingSpec,
    CommandKind,
    CommandRecord,
    RecoveryReport,
    SessionRecord,
    SinkKind,
    SpawnResult,
    Store,
    StoreOptions,
    ops,
)
from store.placement import Placement
from store.usage import Budget

if TYPE_CHECKING:  # the transcript reader is imported by the import itself
    from actors.delivery.notifier import Notifier
    from control_plane.retention.schedule import RetentionSchedule

AgentInput = AgentSpec | str | list[str] | tuple[str, ...]


class ControlPlane(HostReads, TranscriptImports):
    """Open with ``ControlPlane.open(path)``; use as a context manager to close cleanly.

    The store, the supervisor of the session actors, the protocol loop and delivery are
    private: hosts and the front ends (serve, batch, the subagent bridge) use the methods
    here and in ``FrontEndServices``."""

    def __init__(
        self,
        store: Store,
        delivery: DeliveryService,
        loop: ProtocolLoop,
        supervisor: Supervisor,
    ) -> None:
        self._store = store
        self._delivery = delivery
        self._loop = loop
        self._supervisor = supervisor
        self._waiters = Waiters(store)
        self._closed = False
        self._bridge: SubagentBridge | None = None
        # The ``[retention]`` schedule (control_plane/retention/schedule.py), when enabled.
        self._retention: RetentionSchedule | None = None
        # The ``[[notify]]`` webhooks' deliverers (actors/delivery/notifier.py), when any.
        self._notifier: Notifier | None = None
        # Activates sessions for prompts submitted without blocking (submit_prompt).
        self._activations = ThreadPoolExecutor(1, thread_name_prefix="cp-activate")

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        options: StoreOptions | None = None,
        settings: RuntimeSettings | None = None,
        *,
        delivery_workers: int = 4,
        delivery_batch: int = 256,
        run_sessions: bool = True,
        subagent_tools: bool = True,
    ) -> ControlPlane:
        """Open (or create) the store at ``path``, recover, resume deliveries and start
        running sessions (``run_sessions=False`` opens the store for inspection only).
        With ``subagent_tools`` every agent gets the MCP subagent tools (spawn_subagent,
        ...), served over a local socket next to the store."""
        return assemble(
            cls,
            path,
            options,
            settings,
            delivery_workers,
            delivery_batch,
            run_sessions,
            subagent_tools,
        )

    @property
    def recovery(self) -> RecoveryReport:
        return self._supervisor.recovery

    def close(self) -> None:
        """Stop every session actor (their agents end), finish deliveries, close the store.
        Queued and interrupted work stays in the store for the next open."""
        if self._closed:
            return
        self._closed = True
        if self._retention is not None:  # between two of its transactions, before the store
            self._retention.stop()
        self._activations.shutdown(wait=True)
        self._supervisor.stop()
        if self._notifier is not None:  # after the last turn's events, before the store
            self._notifier.close()
        if self._bridge is not None:
            self._loop.call(self._bridge.stop(), 10)
        self._loop.stop()
        self._waiters.close()
        self._delivery.close()
        self._store.close()

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions ------------------------------------------------------------------------

    def spawn(
        self,
        agent: AgentInput,
        cwd: str | os.PathLike[str] | None = None,
        prompt: PromptInput | None = None,
        *,
        jsonl_sink: str | os.PathLike[str] | None = None,
        callback_sink: str | None = None,
        idempotency_key: str | None = None,
        queue_mode: QueueMode | str = QueueMode.FOLLOWUP,
        metadata: dict[str, Any] | None = None,
        parent: str | None = None,
        mode: str = "session",
        announce: bool = True,
        announce_as_prompt: bool = True,
        mcp_servers: Sequence[dict[str, Any]] | None = None,
        budget: Budget | None = None,
        tree_budget: Budget | None = None,
        placement: Placement | None = None,
        workspace: str | None = None,
        workspace_base: str = "HEAD",
        workspace_name: str | None = None,
        setup: str | None = None,
    ) -> SpawnResult:
        """Create a session, its binding and its first prompt in one transaction.

        The same ``idempotency_key`` with the same arguments returns the first spawn; with
        other arguments it raises ``IdempotencyConflict``.

        With ``parent`` the session is a child (subagent): limits are checked
        (``LimitExceeded`` names the limit), ``mode="run"`` closes it after its first turn,
        ``mode="session"`` keeps it for follow-ups, and with ``announce`` every finished run
        is announced to the parent exactly once (an ``announce`` event, and with
        ``announce_as_prompt`` a follow-up prompt for the parent).

        ``mcp_servers`` (ACP ``McpServer`` objects as dicts) are offered to the agent at each
        launch besides the control plane's own; their env and header values are kept in
        this process's memory, never stored (``actors/client_mcp.py``).

        ``budget`` limits this session's tokens and/or cost, ``tree_budget`` (on a root) its
        whole tree's; both override the configured defaults (``docs/observability.md``).

        ``placement`` says which nodes of a shared store may run it (``Placement(node=...)``
        or ``Placement(labels=(...))``; default any, or the parent's for a child).

        ``workspace="worktree"``: a git worktree of ``cwd``'s repository at ``workspace_base``,
        set up with ``setup``, checkpointed at every turn end (``docs/workspaces.md``).
        """
        spec = self.resolve_agent(agent)
        if workspace is not None:
            cwd, metadata = forking.plan_workspace(
                self.settings, workspace, cwd, idempotency_key, workspace_base, workspace_name,
                setup, metadata,
            )  # fmt: skip
        # Values the host handed in are kept in memory for this process's launches only.
        self.settings.agent_profiles.remember(spec)
        sinks = [x for x in (jsonl_sink, callback_sink) if x is not None]
        if len(sinks) > 1 or (sinks and parent is not None and announce):
            raise ValueError("a spawn takes one binding: a sink, or the parent announce")
        if mode not in ("run", "session"):
            raise ValueError("mode must be 'run' or 'session'")
        binding: BindingSpec | None = None
        if jsonl_sink is not None:
            binding = BindingSpec(SinkKind.JSONL, os.path.abspath(os.fspath(jsonl_sink)))
        elif callback_sink is not None:
            binding = BindingSpec(SinkKind.CALLBACK, callback_sink)
        elif parent is not None and announce:
            binding = BindingSpec(SinkKind.PARENT, parent)
        meta = dict(metadata or {})
        if parent is not None:
            meta.update({"mode": mode, "announcePrompt": announce_as_prompt})
        if mcp_servers:
            meta["mcpServers"] = redacted_mcp_servers(mcp_servers)
        if budget is not None:
            meta["budget"] = budget.to_json()
        if tree_budget is not None:
            meta["treeBudget"] = tree_budget.to_json()
        result = self._store.spawn(
            spec,
            os.path.abspath(os.fspath(cwd if cwd is not None else os.getcwd())),
            binding,
            None if prompt is None else prompt_blocks(prompt),
            idempotency_key,
            parent_id=parent,
            metadata=meta,
            queue_mode=QueueMode(queue_mode).value,
            limits=self.settings.subagent_limits,
            placement=placement,
            # The sweep may start the session's actor as soon as the spawn commits.
            before_commit=self.settings.client_mcp.remembering(mcp_servers),
        )
        self._supervisor.notify(result.session.id)
        return result

    def children(self, session_id: str) -> list[SessionRecord]:
        return self._store.list_sessions(parent_id=session_id, limit=10_000)

    def prompt(
        self,
        session_id: str,
        prompt: PromptInput,
        *,
        idempotency_key: str | None = None,
        mode: QueueMode | str | None = None,
    ) -> CommandRecord:
        """Queue a prompt; returns the command (the original one for a repeated key).

        ``mode`` overrides the session's queue mode for this prompt: ``followup`` waits its
        turn, ``collect`` merges with prompts queued meanwhile, ``steer`` cancels the running
        turn and runs next, ``interrupt`` also cancels everything queued before it.
        """
        return self.submit_prompt(
            session_id, prompt, idempotency_key=idempotency_key, mode=mode
        ).result()

    def submit_prompt(
        self,
        session_id: str,
        prompt: PromptInput,
        *,
        idempotency_key: str | None = None,
        mode: QueueMode | str | None = None,
    ) -> Future[CommandRecord]:
        """``prompt`` without blocking: the future resolves once the command is durable (and
        the session's actor has been told). For callers on an event loop
        (``asyncio.wrap_future``), where a thread hop per prompt would be pure overhead."""
        payload = {"content": prompt_blocks(prompt)}
        chosen = QueueMode(mode) if mode is not None else None

        done: Future[CommandRecord] = Future()
        # The write queues the prompt and, when the session's actor is idle with its agent
        # up, claims it for that actor in the same transaction (actors/session/claim_offer.py).
        claim = self._supervisor.prompt_claim(
            session_id,
            functools.partial(
                ops.submit_prompt,
                session_id=session_id,
                payload=payload,
                idempotency_key=idempotency_key,
                mode=chosen,
            ),
        )

        def committed(
            future: Future[tuple[CommandRecord, bool, list[CommandRecord]]],
        ) -> None:
            # On the store's writer thread, after the commit: telling actors never blocks.
            exc = future.exception()
            command, cancel_running, claimed = (None, False, []) if exc else future.result()
            try:
                if cancel_running:
                    self._supervisor.cancel_turn(session_id)
                if not self._supervisor.committed(claim, claimed) and exc is None:
                    # Activation reads the store: not on the writer thread. (Refused once
                    # closing: the command stays queued in the store for the next open.)
                    with contextlib.suppress(RuntimeError):
                        self._activations.submit(self._supervisor.notify, session_id)
            finally:
                if exc is not None:
                    done.set_exception(exc)
                else:
                    assert command is not None
                    done.set_result(command)

        self._store.submit(claim.write).add_done_callback(committed)
        return done

    def set_mode(
        self, session_id: str, mode_id: str, *, idempotency_key: str | None = None
    ) -> CommandRecord:
        return self._control(session_id, CommandKind.SET_MODE, {"modeId": mode_id}, idempotency_key)

    def set_config_option(
        self,
        session_id: str,
        config_id: str,
        value: str | bool,
        *,
        idempotency_key: str | None = None,
    ) -> CommandRecord:
        payload = {"configId": config_id, "value": value}
        return self._control(session_id, CommandKind.SET_CONFIG_OPTION, payload, idempotency_key)

    def _control(
        self, session_id: str, kind: CommandKind, payload: dict[str, Any], key: str | None
    ) -> CommandRecord:
        command = self._store.enqueue(session_id, kind, payload, key).command
        self._supervisor.notify(session_id)
        return command

    def cancel(self, session_id: str, *, include_queued: bool = False) -> SessionState:
        """Cancel the running turn (its command ends ``cancelled``); with ``include_queued``
        also every queued command. Running descendants are cancelled too. Idempotent."""
        state, children = self._store.write(
            lambda ctx: ops.cancel_tree(ctx, session_id, include_queued)
        )
        for sid in (session_id, *children):
            self._supervisor.cancel_turn(sid)
        return state

    def fork(
        self,
        session_id: str,
        at: int | None = None,
        *,
        idempotency_key: str | None = None,
        supersede: bool = False,
        metadata: dict[str, Any] | None = None,
        mcp_servers: list[dict[str, Any]] | None = None,
    ) -> SpawnResult:
        """A new session with this one's conversation up to turn ``at`` (default the last)
        and, in a workspace, a worktree at its checkpoint; ``supersede`` (rewind) closes this
        one (``docs/workspaces.md``, "Fork and rewind"; ``ForkRefused``). ``mcp_servers``:
        the fork's client MCP servers, as for ``spawn``; None: the source's."""
        # The fork's agent starts once it is made (a fork is `creating`).
        notify = self._supervisor.notify
        result = forking.fork(
            self._store,
            self.settings,
            forking.ForkRequest(session_id, at, idempotency_key, metadata, mcp_servers),
            notify,
        )
        if supersede and self.get(session_id).state is not SessionState.CLOSED:
            turn = result.session.metadata["forkOf"]["turn"]
            self.close_session(
                session_id, f"superseded: rewound to turn {turn} as session {result.session.id}"
            )
        return result

    def close_session(self, session_id: str, reason: str = "closed") -> SessionRecord:
        """Close for good: the agent is stopped, open commands are cancelled; then every
        descendant, parents before children, so no announce lands in a closed parent (a
        crash in between is finished by recovery, which closes orphans)."""
        descendants = self.descendants(session_id)
        self._close_one(session_id, reason)
        if descendants:
            # The live ones all at once (each actor stops its agent, then closes its row),
            # the rest in one transaction: not one 120 s ask after another.
            by_actor = self._supervisor.close_many(descendants, "parent session closed")
            rest = [sid for sid in descendants if sid not in by_actor]
            if rest:
                self._store.write(
                    lambda ctx: ops.close_sessions(ctx, rest, "parent session closed")
                )
        return self._store.get_session(session_id)

    def _close_one(self, session_id: str, reason: str) -> None:
        if not self._supervisor.close(session_id, reason):
            self._store.close_session(session_id, reason)
