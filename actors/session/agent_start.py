"""Starting and stopping a session's agent.

Starting: what is left of its previous process tree killed first, the process spawned (or a
prestarted one adopted), ``initialize``, then its ACP session created or restored (resume >
load > new + ``context_lost``; load first when a prompt a crash cut off is next), each step
within ``agent_start_timeout_s`` (given again, up to ``START_PATIENCE`` times, to an agent
that keeps using CPU) and under the process-wide cap on starts at once. The actor records
the outcome. Stopping: the agent ended in order (or killed), then what it wrote made
durable."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from actors import telemetry
from actors.session.deps import ActorDeps
from actors.session.launch import launch_for
from actors.session.leftovers import kill_leftovers
from actors.session.recorder import StoreRecorder
from actors.settings import RuntimeSettings
from protocol.agent.connection import AgentConnection
from protocol.agent.frame_router import REPLAY_SETTLE_MAX_S
from protocol.agent.permissions import PermissionBroker
from protocol.agent.prestart import Prestarted
from protocol.agent.proc_tree import cpu_used_between, tree_cpu
from protocol.loop import ProtocolLoop
from state_machines import AgentProtocolError, AgentStartFailed, StoreError
from store import SessionRecord, queries
from store.ops import turns
from store.ops.interrupted import RestartTerms, session_policy, was_cut_off
from store.ownership import this_owner
from store.writer import WriteContext

log = logging.getLogger(__name__)

# What of an agent's session/new (or load, resume) answer describes the session it offers.
SESSION_SETUP_KEYS = ("modes", "models", "configOptions")


@dataclass(frozen=True)
class StartedAgent:
    conn: AgentConnection
    acp_session_id: str
    how: str  # "new" | "resumed" | "loaded" | "forked" | "context_lost"
    details: dict[str, Any]  # the agent_started event's payload
    process_tree: dict[str, Any] | None
    capabilities: tuple[tuple[str, ...], dict[str, Any]]  # (command, initialize answer)
    # Loaded with a cut-off prompt next in the queue: the last user message its replay held.
    restored_prompt: str | None = None

    def record(self, session_id: str, epoch: int) -> Callable[[WriteContext], None]:
        """The write that puts this start on record (``agent_started``), fenced by ``epoch``."""
        return lambda ctx: turns.agent_started(
            ctx,
            session_id,
            epoch,
            self.acp_session_id,
            self.how,
            self.details,
            self.process_tree,
            self.capabilities,
        )

    def restart_terms(self, settings: RuntimeSettings, continuation: str) -> RestartTerms:
        """What a cut-off turn gets from this agent (store/ops/interrupted.py): a restored
        conversation (resumed or loaded) may be continued, with ``continuation``."""
        kept = self.how in ("resumed", "loaded")
        return RestartTerms(
            kept, settings.interrupted_turns, continuation, restored_prompt=self.restored_prompt
        )


def start_failure(session_id: str, epoch: int, exc: BaseException) -> Callable[[WriteContext], Any]:
    """The write that puts a failed start on record: the reason, the agent's own JSON-RPC
    error if it answered with one, and the end of its stderr if it exited (kept with the
    failure: the start's clean-up kills the process, and ``agent_exited`` is recorded only for
    an exit nobody asked for, which a loaded machine can report after that kill)."""
    error = str(exc) or type(exc).__name__
    agent_error = getattr(exc, "agent_error", None)
    tail = getattr(exc, "stderr_tail", None)
    return lambda ctx: turns.start_failed(ctx, session_id, epoch, error, agent_error, tail)


def start_agent(
    session: SessionRecord,
    deps: ActorDeps,
    recorder: StoreRecorder,
    on_exit: Callable[[int | None], None],
) -> StartedAgent:
    """The started agent; ``AgentStartFailed``, ``AgentProtocolError`` or ``TimeoutError``
    with the process already ended."""
    settings = deps.settings
    share = settings.sessions_per_process(session.agent.name)
    pool = deps.agent_pool
    # A process this session shares with others that still runs is no leftover.
    tree = session.agent_process
    leftovers = 0 if pool.owns(tree) else kill_leftovers(session.id, tree)
    launch = launch_for(session, settings)
    prestarted, take_prestarted = None, None
    if settings.prestarted is not None:
        pool_of_one = settings.prestarted
        if share == 1:
            prestarted = pool_of_one.take(launch.command, launch.cwd, launch.env)
        else:  # only if a new shared process is started for this session

            def take_prestarted() -> Prestarted | None:
                return pool_of_one.take(launch.command, launch.cwd, launch.env)

    conn = AgentConnection(
        launch,
        recorder,
        PermissionBroker(settings.permission_policy, settings.ask, session.id),
        on_exit=on_exit,
        fs_forward=settings.fs_forward,
        prestarted=prestarted,
        hosts=pool,
        sessions_per_process=share,
        take_prestarted=take_prestarted,
    )
    loop = deps.loop
    timeout = settings.agent_start_timeout_s
    cut_off = False
    try:
        with deps.starts:  # the start timeout counts from here, not from the queue
            whose = f"session {session.id}"
            init = call_while_working(loop, conn.start(), timeout, conn, whose)
            # After initialize: the tools' transport depends on what the agent speaks.
            mcp_servers = tools_for(session.id, settings, conn.process_tree, speaks_http_mcp(init))
            mcp_servers += settings.client_mcp.for_launch(
                session.id, session.metadata.get("mcpServers", [])
            )
            fork_from = session.metadata.get("forkAgentSession")
            if session.acp_session_id:
                # A prompt a crash cut off is next, to be continued if the agent had it: load
                # rather than resume, so that the replay says whether it had it.
                cut_off = _cut_off_prompt_next(session, deps)
                restoring = conn.restore_session(session.acp_session_id, mcp_servers, cut_off)
                opened = call_while_working(loop, restoring, timeout, conn, whose)
            elif fork_from and conn.can_fork():
                # A fork at the source's last turn, of an agent that forks: it copies its own
                # conversation (else the conversation is sent with the first prompt).
                forking = conn.fork_session(fork_from, mcp_servers)
                opened = call_while_working(loop, forking, timeout, conn, whose)
            else:
                creating = conn.new_session(mcp_servers)
                opened = call_while_working(loop, creating, timeout, conn, whose)
    except (AgentStartFailed, AgentProtocolError, TimeoutError) as exc:
        telemetry.AGENT_STARTS.labels("failed").inc()
        if not deps.stopping.is_set():  # a start cut short by the shutdown is no failure
            log.warning("session %s: the agent did not start: %s", session.id, exc)
        with contextlib.suppress(Exception):  # the start's own error is the one to report
            loop.call(conn.kill(), 30)
        raise
    telemetry.AGENT_STARTS.labels("joined" if conn.joined_running_process else "started").inc()
    info = init.agent_info
    details: dict[str, Any] = {
        "pid": conn.pid,
        "node": this_owner(),  # which control-plane process runs it (a fleet has several)
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
        _restored_prompt(session.id, opened.how == "loaded" and cut_off, conn, loop),
    )


def _cut_off_prompt_next(session: SessionRecord, deps: ActorDeps) -> bool:
    """The session's next command is a prompt a crash cut off, and its policy continues such
    prompts (under ``report`` the answer would change nothing)."""
    policy = session_policy(session.metadata, deps.settings.interrupted_turns)
    if policy != "continue":
        return False
    try:
        head = deps.store.read(lambda c: queries.next_queued(c, session.id))
    except StoreError as exc:  # the start goes on as before: resume, and the log decides
        log.info("session %s: reading its next command: %s", session.id, exc)
        return False
    return head is not None and was_cut_off(head)


def _restored_prompt(
    session_id: str, wanted: bool, conn: AgentConnection, loop: ProtocolLoop
) -> str | None:
    """``wanted`` (loaded, with a cut-off prompt next): the last user message the agent's
    replay held (store/ops/interrupted.py ``reached_agent``). Waits for a replay that trails
    the load's answer to go quiet, as the next prompt would anyway."""
    if not wanted:
        return None
    try:
        return loop.call(conn.restored_prompt(), REPLAY_SETTLE_MAX_S + 10)
    except Exception as exc:  # without it the log decides
        log.info("session %s: the load's replay: %s", session_id, exc)
        return None


# A step of a start that runs past ``agent_start_timeout_s`` while the agent's process tree
# keeps using CPU is not hung but slow: a host busy with other work starves an agent that runs
# nicer than it (``agent_nice``; measured: ten times slower to answer ``initialize`` beside two
# busy processes on two cores). It gets the timeout again, up to this many times in all.
START_PATIENCE = 4
# Working: the agent's tree used at least this share of one CPU over the last timeout.
WORKING_CPU_SHARE = 0.02


def speaks_http_mcp(init: Any) -> bool:
    """Whether the agent's ``initialize`` answer advertises ``mcpCapabilities.http``."""
    caps = getattr(init, "agent_capabilities", None)
    mcp = getattr(caps, "mcp_capabilities", None)
    return bool(getattr(mcp, "http", False))


def tools_for(
    session_id: str, settings: RuntimeSettings, process_tree: dict[str, Any] | None, http: bool
) -> list[dict[str, Any]]:
    """The control plane's own MCP servers for the session (the subagent tools), if any."""
    if settings.mcp_servers is None:
        return []
    return settings.mcp_servers(session_id, process_tree, http)


def call_while_working(
    loop: ProtocolLoop, coro: Any, timeout: float, conn: AgentConnection, whose: str
) -> Any:
    """``loop.call(coro, timeout)`` for a step of an agent's start, with patience for an
    agent that works but slowly (see ``START_PATIENCE``); ``TimeoutError`` saying which.
    ``whose``: the start's owner in the log (``session <id>``, serve's probe)."""
    future = loop.submit(coro)
    # Before the spawn there is no tree yet: all the CPU it uses then is this step's.
    before = _tree_cpu(conn) or {}
    waited = 0
    while True:
        try:
            return future.result(timeout)
        except TimeoutError:
            waited += 1
        now = _tree_cpu(conn)
        used = 0.0 if now is None else cpu_used_between(before, now)
        if used < WORKING_CPU_SHARE * timeout:
            raise TimeoutError(
                f"the agent did not answer within {waited * timeout:g} s and used "
                f"{used:.2f} s of CPU in the last {timeout:g} s: hung "
                "(timeouts.agent_start_s)"
            )
        if waited == START_PATIENCE:
            raise TimeoutError(
                f"the agent did not start within {waited * timeout:g} s although it kept "
                f"working ({START_PATIENCE} x timeouts.agent_start_s)"
            )
        log.info(
            "%s: the agent is still starting after %g s (%.2f s of CPU in the last "
            "%g s): waiting %g s more",
            whose,
            waited * timeout,
            used,
            timeout,
            timeout,
        )
        before = now or {}


def _tree_cpu(conn: AgentConnection) -> dict[int, float] | None:
    pid = conn.pid
    return None if pid is None else tree_cpu(pid)


def call_quietly(loop: ProtocolLoop, coro: Any, timeout: float, session_id: str) -> None:
    """A best-effort agent call (a cancel, a close, a stop): its failure is only logged."""
    try:
        loop.call(coro, timeout)
    except Exception as exc:
        log.info("session %s: %s", session_id, exc)


def stop_agent(
    conn: AgentConnection | None,
    recorder: StoreRecorder,
    loop: ProtocolLoop,
    kill: bool,
    session_id: str,
) -> None:
    """End the agent (in order, or killed), then make what it wrote durable before it is
    forgotten: the recorder may be holding its last updates for the write interval, on a
    loop that may stop next."""
    if conn is not None:
        call_quietly(loop, conn.kill() if kill else conn.stop(), 30, session_id)
    try:
        recorder.flush_future().result(30)
    except Exception as exc:  # a failed write was logged by the recorder already
        log.info("session %s: flushing agent output: %s", session_id, exc)
