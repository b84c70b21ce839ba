"""The supervisor: activation, passivation, the turn-slot limit, recovery, discovery.

- A session with work gets a slot in FIFO order (``TurnSlots``); only then is its actor
  started. A backlog of thousands of sessions costs a deque entry each, no thread.
- Idle actors are passivated after ``passivate_after_s`` (agent stopped, ownership released),
  or earlier, least recently used first, while more than ``max_live_agents`` are live
  (``actors/live_agents.py``); the next command activates the session again and the agent
  restores its ACP session.
- On open: ``recover`` (interrupted runs requeued within their attempt budget, else failed),
  then every session with work (queued commands, or still ``creating``) is queued for a slot.
- A sweep thread repeats discovery: work queued by another process, or left by an owner that
  died, is picked up here (taking ownership raises the fencing epoch); a dead owner's idle
  sessions are given up (``NodeLease.release_dead_owners``).
- This process is a node of the store with a lease (actors/node_lease.py): owners whose lease
  ran out are dead to the others; a node that loses its own lease stops every actor (their
  agents with them) before going on. Discovery only takes sessions whose placement allows
  this node (store/placement.py). On PostgreSQL, a change another node commits reaches the
  owner at once (store/listen.py); discovery stays the fallback.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pykka

from actors import telemetry
from actors.agent_pool import AgentPool
from actors.discovery import find_work
from actors.live_agents import LiveAgents
from actors.node_lease import NodeLease
from actors.session.actor import SessionActor
from actors.session.claim_offer import PromptClaim
from actors.session.deps import ActorDeps
from actors.session.messages import CancelTurn, CloseSession, Noticed, SlotGranted, Tick, Wake
from actors.settings import RuntimeSettings
from actors.slots import TurnSlots
from protocol.loop import ProtocolLoop
from protocol.os_thread_name import name_this_thread, name_threads
from state_machines import ControlPlaneError
from store import CommandRecord, RecoveryReport, Store, ops, queries
from store.listen import SessionNotifications
from store.location import Backend
from store.ops.nodes import NodeSpec
from store.ownership import this_owner
from store.writer import WriteContext

log = logging.getLogger(__name__)

# Longest an actor's on_stop may take (ending its agent: agent_shutdown_timeout_s plus the
# reaper's kill bound; its last writes: the store's lock_timeout) before the sweep forgets it.
STOP_BOUND_S = 120.0


class Supervisor:
    def __init__(self, store: Store, loop: ProtocolLoop, settings: RuntimeSettings) -> None:
        self.store = store
        self.loop = loop
        self.settings = settings
        self.me = this_owner()
        self._lock = threading.RLock()
        self._actors: dict[str, pykka.ActorRef[SessionActor]] = {}
        # Sessions granted a slot while their previous actor was still stopping: activated
        # once it has (two actors of one session never overlap, not even in on_stop).
        self._activate_after_stop: set[str] = set()
        # When the sweep first saw each entry's actor no longer alive (see ``_sweep``).
        self._dead_since: dict[str, float] = {}
        self.slots = TurnSlots(settings.max_running_turns, self._granted)
        self.live_agents = LiveAgents(settings.max_live_agents)
        self._deps = ActorDeps(
            store,
            loop,
            self.slots,
            settings,
            self._stopped,
            threading.BoundedSemaphore(max(1, settings.max_concurrent_starts)),
            self.notify,
            self.cancel_turn,
            live_agents=self.live_agents,
            agent_pool=AgentPool(settings.shared_agent_idle_s),
        )
        self._stopping = self._deps.stopping
        self._sweeper = threading.Thread(target=self._sweep, name="supervisor-sweep", daemon=True)
        self.recovery = RecoveryReport()
        self.activations = 0
        self._started = False  # an unstarted supervisor (inspection only) runs nothing
        self.node = NodeSpec(
            self.me,
            settings.node_name or socket.gethostname(),
            tuple(settings.node_labels),
            settings.max_running_turns,
        )
        self.lease = NodeLease(
            store, self.node, settings.lease_s, lambda: self.slots.running, self.fence
        )
        self._listener: SessionNotifications | None = None
        if store.backend is Backend.POSTGRESQL:
            self._listener = SessionNotifications(store, self.me, self.remote_change, self.poke)
        self._poke = threading.Event()  # discover at the next sweep, not after the interval

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> RecoveryReport:
        self.lease.start()  # first: the recovery below judges the other owners by lease
        self.recovery = self.store.recover(self.me)
        telemetry.recovered(self.recovery)
        orphans = self.store.write(ops.close_orphans)
        if orphans:
            log.warning("closed %d sessions whose parent was closed: %s", len(orphans), orphans)
        self._started = True
        if self._listener is not None:
            self._listener.start()
        self._discover()
        self._sweeper.start()
        return self.recovery

    def stop(self, timeout: float = 60) -> None:
        self._stopping.set()
        if self._sweeper.is_alive():
            self._sweeper.join(timeout)
        self._stop_actors(timeout)
        # Shared agent processes the actors left (waiting for a next session): the
        # control plane stops, and its agents die with it.
        self._close_pool(self._deps.agent_pool.close())
        if self._listener is not None:
            self._listener.stop()
        if self._started:
            self.lease.stop()

    def fence(self, reason: str) -> None:
        """This node lost its lease (or may be about to): stop every actor, which ends its
        agent; a session another node took over refuses their last writes (StaleEpoch).
        The process goes on: discovery picks up what is still, or again, this node's."""
        log.error(
            "node %s: %s; stopping all %d sessions here", self.me, reason, len(self.live_sessions())
        )
        self._stop_actors(STOP_BOUND_S)
        self._close_pool(self._deps.agent_pool.stop_idle())

    def _close_pool(self, ending: Coroutine[Any, Any, None]) -> None:
        try:
            self.loop.call(ending, STOP_BOUND_S)
        except Exception:  # the loop is gone: the reaper ends what is left with the process
            log.exception("stopping shared agent processes failed")

    def _stop_actors(self, timeout: float) -> None:
        """Stop every actor at once (each ends its agent), then wait for all. Each one's
        halt first: an actor retrying a write to an unreachable store gives up and gets to
        its stop."""
        with self._lock:
            refs = list(self._actors.values())
        for halt in list(self._deps.halts.values()):
            halt.set()
        stopping = []
        for ref in refs:
            with contextlib.suppress(pykka.ActorDeadError):
                stopping.append(ref.stop(block=False))
        for future in stopping:
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                future.get(timeout=timeout)

    @property
    def notifications(self) -> SessionNotifications | None:
        """PostgreSQL: this node's listener (its ``counts`` by channel kind); else None."""
        return self._listener

    def remote_change(self, session_id: str) -> None:
        """Work, a cancel or a close another node sent to this one (store/listen.py)."""
        if not self._started:
            return
        ref = self._live(session_id)
        if ref is not None:
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(Noticed())
                return
        self._poke.set()  # the sweep thread checks placement and ownership, not this one

    def poke(self) -> None:
        """Discover at the next sweep (after the listener reconnected)."""
        self._poke.set()

    # -- entry points (any thread) -------------------------------------------------------

    def notify(self, session_id: str) -> None:
        """The session may have new work."""
        if not self._started:
            return
        if not self.wake(session_id):
            self.slots.request(session_id)

    def prompt_claim(
        self, session_id: str, enqueue: Callable[[WriteContext], tuple[CommandRecord, bool]]
    ) -> PromptClaim:
        """The write for a prompt to ``session_id`` that also claims it when the session's
        actor offers (``actors/session/claim_offer.py``); ``committed`` settles it."""
        return PromptClaim(self._deps.offers, self.slots, session_id, enqueue)

    def committed(self, claim: PromptClaim, claimed: list[CommandRecord]) -> bool:
        """A prompt's write committed (or failed: ``claimed`` empty). On the writer thread:
        only messages. False if the session has no live actor (activate it elsewhere)."""
        claim.resolve(claimed)
        return self.wake(session_id=claim.session_id)

    def wake(self, session_id: str) -> bool:
        """Tell the session's live actor it may have new work; False if none is live. Only a
        message: safe on any thread, the store's writer included (activating an actor, what
        ``notify`` may do instead, reads the store)."""
        if not self._started:
            return True  # an unstarted supervisor runs nothing: nothing left to do
        ref = self._live(session_id)
        if ref is None:
            return False
        try:
            ref.tell(Wake())
        except pykka.ActorDeadError:
            return False  # stopped between the check and the tell: activate anew
        return True

    def cancel_turn(self, session_id: str) -> None:
        ref = self._live(session_id)
        if ref is not None:
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(CancelTurn())

    def close(self, session_id: str, reason: str) -> bool:
        """Close through the live actor (it stops the agent first); False if none is live.
        What the actor's close raised (the store refusing the write) is raised here."""
        ref = self._live(session_id)
        if ref is None:
            return False
        try:
            ref.ask(CloseSession(reason), timeout=120)
        except pykka.ActorDeadError:
            return False
        return True

    def close_many(self, session_ids: list[str], reason: str) -> set[str]:
        """``close`` for several sessions at once: their live actors are asked together and
        waited for together. Returns the sessions an actor closed. The first error an actor
        raised (the store refusing the write) is raised after all have answered."""
        asked: list[tuple[str, Any]] = []
        for sid in session_ids:
            ref = self._live(sid)
            if ref is not None:
                with contextlib.suppress(pykka.ActorDeadError):
                    asked.append((sid, ref.ask(CloseSession(reason), block=False)))
        closed: set[str] = set()
        error: BaseException | None = None
        for sid, future in asked:
            try:
                future.get(timeout=120)
                closed.add(sid)
            except pykka.ActorDeadError:
                pass  # stopped meanwhile: closed in the store by the caller
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error
        return closed

    def live_sessions(self) -> list[str]:
        with self._lock:
            return [sid for sid, ref in self._actors.items() if ref.is_alive()]

    # -- internals -----------------------------------------------------------------------

    def _live(self, session_id: str) -> pykka.ActorRef[SessionActor] | None:
        with self._lock:
            ref = self._actors.get(session_id)
            return ref if ref is not None and ref.is_alive() else None

    def _granted(self, session_id: str) -> None:
        if self._stopping.is_set() or not self._started:
            return  # shutting down: the session keeps its work in the store for next time
        with self._lock:
            ref = self._actors.get(session_id)
            if ref is not None and not ref.is_alive():
                # Its previous actor is still in on_stop (ending its agent, releasing the
                # session): a second one now would run beside it. Activate after it is done.
                self._activate_after_stop.add(session_id)
                ref = None
            elif ref is None and not self._owned_elsewhere(session_id):
                ref = SessionActor.start(session_id, self._deps)
                self._actors[session_id] = ref
                self.activations += 1
        if ref is None:
            # Another live process runs it (its own sweep sees the new work), or its old
            # actor is stopping (``_stopped`` asks for a slot again).
            self.slots.release(session_id)
            return
        try:
            ref.tell(SlotGranted())
        except pykka.ActorDeadError:
            # It stopped meanwhile (passivated, lost ownership): once its on_stop is over,
            # ``_stopped`` activates the session again.
            with self._lock:
                self._activate_after_stop.add(session_id)
                stopped_already = session_id not in self._actors
            self.slots.release(session_id)
            if stopped_already:  # its on_stop ended before we noted it: ask again now
                self._activate_after_stop.discard(session_id)
                self.slots.request(session_id)

    def _owned_elsewhere(self, session_id: str) -> bool:
        """Not for this node: another live node owns it, or its placement is elsewhere."""
        try:
            session = self.store.get_session(session_id)
            if session.placement is not None and not session.placement.allows(
                self.node.name, self.node.labels
            ):
                return True
            owner = session.owner
            if owner is None or owner == self.me:
                return False
            return bool(self.store.read(lambda c: queries.Liveness(c).alive(owner)))
        except ControlPlaneError:
            return True  # unknown or unreadable: nothing to run

    def _stopped(self, session_id: str, actor_urn: str) -> None:
        """An actor's on_stop is over: forget it (only that one: a newer actor of the session
        is never forgotten for an older one) and activate the session again if it was
        granted a slot meanwhile."""
        with self._lock:
            ref = self._actors.get(session_id)
            if ref is not None and ref.actor_urn == actor_urn:
                del self._actors[session_id]
                self._dead_since.pop(session_id, None)
            again = session_id in self._activate_after_stop and session_id not in self._actors
            self._activate_after_stop.discard(session_id)
        # An actor that stopped holding a slot (crash, takeover) must not leak it.
        if ref is not None and ref.actor_urn == actor_urn:
            self.slots.release(session_id)
        if again and not self._stopping.is_set():
            self.slots.request(session_id)

    def _discover(self) -> None:
        """Queue every session with work that no live process owns (actors/discovery.py)."""
        find_work(self.store, self.me, self.node, self.slots, self._live)

    def _sweep(self) -> None:
        name_this_thread()
        interval = self.settings.sweep_interval_s
        last_discovery = time.monotonic()
        name_threads()  # the store's threads and the pools' (see protocol/os_thread_name.py)
        while not self._stopping.wait(interval):
            try:
                name_threads()
                now = time.monotonic()
                with self._lock:
                    refs = list(self._actors.items())
                over_cap = set(self.live_agents.over_cap([s for s, r in refs if r.is_alive()]))
                for session_id, ref in refs:
                    if ref.is_alive():
                        with contextlib.suppress(pykka.ActorDeadError):
                            ref.tell(Tick(now, session_id in over_cap))
                    elif now - self._dead_since.setdefault(session_id, now) > STOP_BOUND_S:
                        # Not alive, and never said its on_stop was over (it raised before
                        # the end): forgotten, so the session can be activated again.
                        log.warning("session %s: actor did not finish stopping", session_id)
                        self._stopped(session_id, ref.actor_urn)
                poked = self._poke.is_set()
                if not poked and now - last_discovery < self.settings.discover_interval_s:
                    continue
                self._poke.clear()
                last_discovery = now
                # Owners gone (lease run out, process gone): their sessions, idle ones too,
                # unowned now, not when a prompt comes; their turns recovered with them.
                self.lease.release_dead_owners()
                report = self.store.recover(self.me, include_mine=False)
                telemetry.recovered(report)
                if report.requeued or report.failed:
                    log.warning("recovered work of a dead owner: %s", report)
                self._discover()
            except Exception:
                log.exception("supervisor sweep failed")
