"""What every session actor is given by the supervisor."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from actors.agent_pool import AgentPool
from actors.live_agents import LiveAgents
from actors.session.claim_offer import ClaimOffers
from actors.session.release import PendingReleases
from actors.settings import RuntimeSettings
from actors.slots import TurnSlots
from protocol.loop import ProtocolLoop
from store import Store


@dataclass(frozen=True)
class ActorDeps:
    store: Store
    loop: ProtocolLoop
    slots: TurnSlots
    settings: RuntimeSettings
    # Tell the supervisor this actor is gone: (session id, actor urn), at the very end of
    # on_stop (its agent ended, its ownership released).
    on_stopped: Callable[[str, str], None]
    starts: threading.BoundedSemaphore  # agent starts in progress, process-wide
    notify: Callable[[str], None]  # wake another session (siblings waiting for their turn)
    cancel_turn: Callable[[str], None]  # cancel a session's running turn (a budget stopped it)
    # Set when the process shuts down (Ctrl-C, close): start no turn and count no failure.
    stopping: threading.Event = field(default_factory=threading.Event)
    # Where the actor posts when it went idle, for the cap on live agents.
    live_agents: LiveAgents = field(default_factory=lambda: LiveAgents(None))
    # Each live actor's "give up retrying writes" event, by actor urn: set for all at
    # shutdown, and when this node lost its lease (the supervisor's fence), so an actor
    # waiting for an unreachable store gets to its stop, which ends its agent.
    halts: dict[str, threading.Event] = field(default_factory=dict)
    # Agent processes shared by several sessions (agents configured for it).
    agent_pool: AgentPool = field(default_factory=AgentPool)
    # Idle sessions' offers to have a prompt claimed in the write that queues it.
    offers: ClaimOffers = field(default_factory=ClaimOffers)
    # Releases at an actor's stop that the store refused for now, retried off its thread.
    releases: PendingReleases = field(default_factory=PendingReleases)
