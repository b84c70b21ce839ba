"""``SessionActor``: one pykka ThreadingActor per live session.

It takes the session's commands from the store one at a time, drives the agent through the
protocol loop, and records every transition through the store's guarded, epoch-fenced writes.

Threads: every handler here runs on the actor's own thread. A turn is started on the protocol
loop and the handler returns at once; the loop reports the end of the turn as a ``TurnDone``
message. So the mailbox stays free during a turn, and ``CancelTurn`` or ``CloseSession``
overtake a running prompt. Short agent calls (start, set mode) block the actor thread on the
loop with a timeout; nothing here blocks the loop.

Exceptions: ``on_receive`` logs what a told message raises and keeps serving (pykka would
otherwise stop the actor for good); an asked one (``CloseSession``) raises to its caller.
``StaleEpoch``: a newer holder took the session over, so the actor kills its agent and stops.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pykka

from actors import log_context
from actors.session import messages as msg
from actors.session.agent_start import call_quietly, start_agent, start_failure, stop_agent
from actors.session.budget_watch import BudgetWatch
from actors.session.claim_offer import ActorOffer
from actors.session.claimed_turns import ClaimedTurns
from actors.session.deps import ActorDeps
from actors.session.durable import await_turn_end, spare_interrupted_turn, write_until_taken
from actors.session.family import children_cap_full, run_is_over, wake_siblings
from actors.session.fork_seed import seed_block
from actors.session.noticing import Noticing
from actors.session.outcomes import control_write, turn_timeout_for
from actors.session.recorder import StoreRecorder
from actors.session.turn_end import TurnEnder
from actors.session.turn_trace import TurnTrace
from actors.session.workspace_steps import RESTORED_NOTE, SessionWorkspace
from actors.workspace import WorkspaceError
from protocol.agent.connection import AgentConnection
from protocol.os_thread_name import name_this_thread
from state_machines import (
    AgentProtocolError,
    AgentStartFailed,
    ControlPlaneError,
    SessionState,
    StaleEpoch,
)
from state_machines.errors import OwnedElsewhere
from store import CommandKind, CommandRecord, ops
from store.ops import turns
from store.ops.interrupted import KEPT_NOTHING
from store.ownership import this_owner
from store.writer import WriteContext

log = logging.getLogger(__name__)
T = TypeVar("T")


class SessionActor(ClaimedTurns, Noticing, pykka.ThreadingActor):
    def __init__(self, session_id: str, deps: ActorDeps) -> None:
        super().__init__()
        self.session_id = session_id
        self.deps = deps
        self.store = deps.store
        self.epoch = -1
        self.conn: AgentConnection | None = None
        self.recorder = StoreRecorder(
            deps.store, session_id, deps.loop, min_interval_s=deps.settings.record_interval_s
        )
        self.budget = BudgetWatch.attached(self.recorder, deps)  # usage against budgets
        self.trace: TurnTrace | None = None  # the session's spans, once its agent is known
        self.turn: tuple[str, ...] | None = None  # command ids of the running turn
        self.turn_seq = 0  # the running (or last) turn's first command's seq
        self.workspace: SessionWorkspace | None = None  # from the metadata, in on_start
        # A fork's agent that does not have the conversation yet: it is sent with the next
        # prompt (actors/session/fork_seed.py).
        self.needs_seed = False
        self.last_active = time.monotonic()
        self.closing = False
        self.turn_timeout: float | None = deps.settings.turn_timeout_s
        self.ender: TurnEnder | None = None  # how the running (or last) turn is ended
        self.halt = threading.Event()  # set by the supervisor: stop retrying writes
        deps.halts[self.actor_urn] = self.halt
        self.offer = ActorOffer(deps.offers, session_id, self.halt)  # idle: claim with enqueue
        self.stop_asked = False  # this actor asked itself to stop: it offers nothing more
        # Whether the live agent was restored with its conversation (resumed or loaded), and
        # what a prompt a crash or Ctrl-C cut off then gets (store/ops/interrupted.py).
        self.restart = KEPT_NOTHING

    # -- lifecycle (actor thread) --------------------------------------------------------

    def on_start(self) -> None:
        name_this_thread()  # pykka's name for it: SessionActor-N
        log_context.bind(self.session_id)  # every line this thread logs names the session
        try:
            self.epoch = self.store.write(
                lambda ctx: ops.acquire(ctx, self.session_id, this_owner())
            )
        except (OwnedElsewhere, ControlPlaneError) as exc:
            log.info("session %s not activated: %s", self.session_id, exc)
            self.stop()
            return
        self.recorder.epoch = self.epoch
        # What never changes after the spawn (parent, queue mode, metadata), read once.
        self.facts = self.store.get_session(self.session_id)
        self.workspace = SessionWorkspace.of(self.facts, self.store, self.deps.settings)

    def on_stop(self) -> None:
        self.stop_asked = True
        self._return_claimed(self.offer.settle(), "the session's actor stopped")
        self._stop_agent(kill=False)
        self.deps.slots.release(self.session_id)
        if self.epoch >= 0 and self.turn is not None and self.deps.stopping.is_set():
            spare_interrupted_turn(self.store, self.session_id, self.epoch, self.turn)
        if self.epoch >= 0:  # refused for now: retried off this thread (release.py)
            self.deps.releases.release(self.store, self.session_id, self.epoch, self.deps.stopping)
        self.deps.live_agents.gone(self.session_id)
        self.deps.halts.pop(self.actor_urn, None)
        self.deps.on_stopped(self.session_id, self.actor_urn)

    def stop(self) -> None:
        self.stop_asked = True  # offers nothing from now on: the stop is in the mailbox
        super().stop()

    def on_failure(self, *_: Any) -> None:
        self.on_stop()

    def on_receive(self, message: Any) -> Any:
        try:
            return self._receive(message)
        finally:
            self.deps.live_agents.post(self.session_id, self.turn is not None, self.last_active)
            self._offer_if_idle()

    def _receive(self, message: Any) -> Any:
        try:
            return self._dispatch(message)
        except StaleEpoch:
            log.warning("session %s was taken over by another process; stopping", self.session_id)
            self._stop_agent(kill=True)
            self.epoch = -1
            self.stop()
        except Exception:
            if isinstance(message, msg.CloseSession):
                raise  # asked, not told: pykka hands it to the caller, the actor lives on
            log.exception("session %s: handling %r failed", self.session_id, message)
        return None

    def _dispatch(self, message: Any) -> Any:
        if self.epoch < 0:
            return None  # not the owner (another live process is): stopping, touch nothing
        handler = self._handlers.get(type(message))
        if handler is None:
            raise TypeError(f"session actor got an unknown message: {message!r}")
        if isinstance(message, msg.Tick):
            # Not active (a tick must not delay passivation), and the offer stays open: the
            # tick settles it only before it acts (noticing.py), so a prompt written while
            # the tick reads the store is still claimed with its enqueue.
            return handler(message)
        self.last_active = time.monotonic()
        if self._settle_offer() and isinstance(message, msg.CancelTurn):
            return None  # told before the claim committed: not for the turn just started
        return handler(message)

    @functools.cached_property
    def _handlers(self) -> dict[type, Callable[[Any], Any]]:
        """One handler per message type (``actors/session/messages.py``)."""
        return {
            msg.Tick: lambda m: self._tick(m.now, m.over_cap),
            msg.Wake: lambda _: self._work(),
            msg.Noticed: lambda _: self._notice_other_processes(then_work=True),
            msg.SlotGranted: lambda _: self._work(),
            msg.TurnDone: self._turn_done,
            msg.CancelTurn: lambda _: self._cancel_turn(),
            msg.CloseSession: lambda m: self._close(m.reason),
            msg.AgentGone: lambda m: self._agent_gone(m.exit_code),
        }

    # -- work ----------------------------------------------------------------------------

    def _work(self) -> None:
        if self.turn is not None or self.closing or self.deps.stopping.is_set():
            return  # a shutting-down process claims nothing: the work stays queued
        state, pending = self.store.session_work(self.session_id)
        if state is SessionState.CLOSED:
            self.stop()
            return
        needs_start = state is SessionState.CREATING
        if not pending and not needs_start:
            self.deps.slots.release(self.session_id)
            return
        if not self.deps.slots.try_take(self.session_id):
            return  # queued for a slot: SlotGranted arrives when admitted
        parent_id = self.facts.parent_id
        if (
            parent_id is not None
            and pending
            and children_cap_full(
                self.store, self.session_id, self.deps.settings.max_running_children
            )
        ):
            self.deps.slots.release(self.session_id)  # woken when a sibling's turn ends
            return
        if not self._ensure_agent():
            if not self.deps.stopping.is_set():
                self._continue()
            return
        if not pending or self.deps.stopping.is_set():
            self.deps.slots.release(self.session_id)
            return
        if self.workspace is not None and not self.workspace.restore_before_claim(self._write):
            self._continue()
            return
        collect = self.facts.queue_mode == "collect"
        cap = self.deps.settings.max_running_children if parent_id else None
        claimed = self._write(
            lambda ctx: turns.begin_next(
                ctx, self.session_id, self.epoch, collect, cap, self.restart
            )
        )
        if not claimed:
            self.deps.slots.release(self.session_id)
            if self.facts.metadata.get("mode") == "run" and run_is_over(
                self.store, self.session_id
            ):
                self._close("the run ended interrupted")  # its prompt was not sent again
            return
        if claimed[0].kind is CommandKind.PROMPT:
            self._start_turn(claimed)
        else:
            self._run_control(claimed[0])
            self._continue()

    def _continue(self) -> None:
        """Give the slot back and queue for another: FIFO fairness between sessions."""
        self.deps.slots.release(self.session_id)
        self.actor_ref.tell(msg.Wake())

    def _ensure_agent(self) -> bool:
        if self.conn is not None and self.conn.alive:
            return True
        self._stop_agent(kill=True)
        session = self.store.get_session(self.session_id)
        if self.workspace is not None:
            try:
                self.workspace.prepare()  # before the agent: its cwd is the worktree
            except WorkspaceError as exc:
                error = f"workspace: {exc}"
                self._write(lambda ctx: turns.start_failed(ctx, self.session_id, self.epoch, error))
                return False
        try:
            self.trace = self.trace or TurnTrace.attached(self.recorder, session.agent.name)
            started = self.trace.agent_start(
                lambda: start_agent(session, self.deps, self.recorder, self._on_agent_exit)
            )
        except (AgentStartFailed, AgentProtocolError, TimeoutError) as exc:
            if self.deps.stopping.is_set():
                # Cut short by the shutdown, not the agent's fault: not counted against the
                # command; the next run starts the agent again.
                log.info("session %s: agent start ended by shutdown: %s", self.session_id, exc)
                return False
            self._write(start_failure(self.session_id, self.epoch, exc))
            return False
        self.conn = started.conn
        fork_of = self.facts.metadata.get("forkOf")
        self.needs_seed = bool(fork_of) and started.how in ("new", "context_lost")
        continuation = self.deps.settings.continuation_prompt
        if self.workspace is not None:
            continuation += RESTORED_NOTE  # a cut-off turn's files are put back first
        self.restart = started.restart_terms(self.deps.settings, continuation)
        self._write(started.record(self.session_id, self.epoch))
        return True

    def _on_agent_exit(self, exit_code: int | None) -> None:
        # Runs on the protocol loop: only a message.
        if self.actor_ref.is_alive():
            self.actor_ref.tell(msg.AgentGone(exit_code))

    def _start_turn(self, claimed: list[CommandRecord]) -> None:
        assert self.conn is not None
        ids = tuple(c.id for c in claimed)
        self.turn = ids
        self.turn_seq = claimed[0].seq
        self.recorder.take_text()  # a failed turn's leftovers are not the next one's
        self.recorder.command_id = ids[0]
        log_context.bind(self.session_id, ids[0])
        if self.trace is not None:
            self.trace.start(claimed, self.facts.metadata, self.conn.permissions)
        blocks = [block for c in claimed for block in c.payload.get("content", [])]
        if self.needs_seed:  # once per agent session that lacks the forked conversation
            self.needs_seed = False
            fork_of = {**self.facts.metadata["forkOf"], "workspace": self.workspace is not None}
            blocks = [seed_block(self.store, self.session_id, ids[0], fork_of), *blocks]
        settings = self.deps.settings
        self.turn_timeout = turn_timeout_for(self.facts.metadata, self.deps.settings.turn_timeout_s)
        parent = self.facts.parent_id
        ender = self.ender = TurnEnder(
            self.session_id,
            self.epoch,
            ids,
            self.turn_timeout,
            self.recorder,
            self.budget,
            bool(self.facts.metadata.get("announcePrompt", True)) if parent else None,
            self.deps.notify,
        )
        # A session closing, or an actor stopping (the process shutting down: the turn is
        # interrupted, not ended), gets no end from the loop (turn_end.py).
        done = ender.on_answer(
            self.actor_ref, lambda: self.closing or self.stop_asked or self.deps.stopping.is_set()
        )
        # Not durable on return: the turn's end is written behind its last updates
        # (StoreRecorder.write_after), one commit for both.
        turn = self.conn.prompt(blocks, self.turn_timeout, settings.cancel_grace_s, durable=False)
        self.deps.loop.when_done(turn, done)

    def _turn_done(self, message: msg.TurnDone) -> None:
        if self.turn != message.command_ids:
            return
        self.turn = None
        self.recorder.command_id = None
        if self.trace is not None:
            self.trace.end(message)
        if self.closing:
            return
        end = message.end
        if end is None:  # the loop could not build it: built here (its errors raise here)
            assert self.ender is not None
            end = self.ender.end(message.result, message.error)
        queued = await_turn_end(self.store, end.committed, end.write, self.halt, self.session_id)
        if self.workspace is not None:
            self.workspace.checkpoint(message.command_ids[0], self.turn_seq)
        for then in end.then:
            then()
        if not end.agent_alive:
            self._stop_agent(kill=True)
        failed = message.error is not None or message.result is None
        if self.facts.parent_id is not None:
            # After the outcome committed: a sibling held back by max_running_children
            # must see this session no longer running when it checks.
            wake_siblings(self.store, self.session_id, self.facts.parent_id, self.deps.notify)
        if not failed and self.facts.metadata.get("mode") == "run":
            self.deps.slots.release(self.session_id)
            self._close("the run finished")  # mode=run: one turn, then closed
            return
        if failed or queued:  # a failed turn always looks at the queue again
            self._continue()
        else:  # nothing queued at the outcome's commit: what comes later finds the offer
            self.deps.slots.release(self.session_id)

    def _run_control(self, command: CommandRecord) -> None:
        """set_mode / set_config_option: short agent calls, outcome recorded at once."""
        assert self.conn is not None
        self._write(control_write(self.conn, self.deps.loop, self.session_id, self.epoch, command))

    # -- control -------------------------------------------------------------------------

    def _cancel_turn(self) -> None:
        if self.turn is not None and self.conn is not None:
            self.deps.loop.submit(self.conn.cancel())

    def _close(self, reason: str) -> None:
        self.closing = True
        if self.conn is not None:
            conn = self.conn
            if self.turn is not None:
                self._call_quietly(conn.cancel())
            self._call_quietly(conn.close_session())
        self._stop_agent(kill=False)
        self.store.close_session(self.session_id, reason)
        self.stop()

    def _agent_gone(self, exit_code: int | None) -> None:
        if self.turn is not None:
            return  # the turn's own error reports it
        self.conn = None
        self._write(lambda ctx: turns.agent_gone(ctx, self.session_id, self.epoch, exit_code))

    # -- helpers -------------------------------------------------------------------------

    def _write(self, fn: Callable[[WriteContext], T]) -> T:
        """A lifecycle write that must land (see ``write_until_taken``)."""
        return write_until_taken(self.store, fn, self.halt, self.session_id)

    def _call_quietly(self, coro: Any, timeout: float = 10) -> None:
        call_quietly(self.deps.loop, coro, timeout, self.session_id)

    def _stop_agent(self, kill: bool) -> None:
        conn, self.conn = self.conn, None
        stop_agent(conn, self.recorder, self.deps.loop, kill, self.session_id)
