"""Starting a session's agent: what is left of its previous process tree killed first, the
process spawned (or a prestarted one adopted), ``initialize``, then its ACP session created
or restored (resume > load > new + ``context_lost``), all within ``agent_start_timeout_s``
and under the process-wide cap on starts at once. The actor records the outcome."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actors.session.launch import launch_for
from actors.session.leftovers import kill_leftovers
from actors.session.recorder import StoreRecorder
from protocol.agent.connection import AgentConnection
from protocol.agent.permissions import PermissionBroker
from state_machines import AgentProtocolError, AgentStartFailed
from store import SessionRecord

if TYPE_CHECKING:
    from actors.session.actor import ActorDeps

# What of an agent's session/new (or load, resume) answer describes the session it offers.
SESSION_SETUP_KEYS = ("modes", "models", "configOptions")


@dataclass(frozen=True)
class StartedAgent:
    conn: AgentConnection
    acp_session_id: str
    how: str  # "new" | "resumed" | "loaded" | "context_lost"
    details: dict[str, Any]  # the agent_started event's payload
    process_tree: dict[str, Any] | None
    capabilities: tuple[tuple[str, ...], dict[str, Any]]  # (command, initialize answer)


def start_agent(
    session: SessionRecord,
    deps: ActorDeps,
    recorder: StoreRecorder,
    on_exit: Callable[[int | None], None],
) -> StartedAgent:
    """The started agent; ``AgentStartFailed``, ``AgentProtocolError`` or ``TimeoutError``
    with the process already ended."""
    leftovers = kill_leftovers(session.id, session.agent_process)
    settings = deps.settings
    launch = launch_for(session, settings)
    prestarted = None
    if settings.prestarted is not None:
        prestarted = settings.prestarted.take(launch.command, launch.cwd, launch.env)
    conn = AgentConnection(
        launch,
        recorder,
        PermissionBroker(settings.permission_policy, settings.ask),
        on_exit=on_exit,
        fs_forward=settings.fs_forward,
        prestarted=prestarted,
    )
    loop = deps.loop
    mcp_servers = [] if settings.mcp_servers is None else settings.mcp_servers(session.id)
    mcp_servers += settings.client_mcp.for_launch(
        session.id, session.metadata.get("mcpServers", [])
    )
    try:
        with deps.starts:  # the start timeout counts from here, not from the queue
            init = loop.call(conn.start(), settings.agent_start_timeout_s)
            if session.acp_session_id:
                opened = loop.call(
                    conn.restore_session(session.acp_session_id, mcp_servers),
                    settings.agent_start_timeout_s,
                )
            else:
                opened = loop.call(conn.new_session(mcp_servers), settings.agent_start_timeout_s)
    except (AgentStartFailed, AgentProtocolError, TimeoutError):
        with contextlib.suppress(Exception):  # the start's own error is the one to report
            loop.call(conn.kill(), 30)
        raise
    info = init.agent_info
    details: dict[str, Any] = {
        "pid": conn.pid,
        "acpSessionId": opened.acp_session_id,
        "agentInfo": None if info is None else info.model_dump(by_alias=True, exclude_none=True),
    }
    if leftovers:
        details["leftoversKilled"] = leftovers
    # What the agent offers this session (modes, models, config options), for clients such
    # as serve's session/new and session/load.
    setup = {k: v for k, v in opened.response.items() if k in SESSION_SETUP_KEYS}
    if setup:
        details["sessionSetup"] = setup
    return StartedAgent(
        conn,
        opened.acp_session_id,
        opened.how,
        details,
        conn.process_tree,
        (session.agent.command, init.model_dump(by_alias=True, exclude_none=True)),
    )
