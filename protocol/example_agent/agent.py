"""A deterministic, offline ACP agent for demos, tests and users without an API key.

Run it with ``python -m protocol.example_agent [flags]``; it speaks ACP on stdio
through the official SDK and logs to stderr only (stdout carries the protocol).

A prompt's words that start with ``#`` are directives, the rest is "the message".
With no directive the agent thinks ``Considering: <message>`` and streams
``Echo: <message>`` word by word.  Directives, in the order their effects happen:

``#updates=N`` (no thought chunk), ``#tool`` / ``#permission`` (permission request,
then tool call), ``#read=PATH``, ``#readlines=PATH:LINE:LIMIT``,
``#write=PATH:CONTENT``, ``#edit=PATH:CONTENT`` (``\\n`` a line break: an edit tool call
with the diff), ``#plan``, ``#plan-steps`` (the plan sent again per step, ``#delay`` apart),
``#title=A_B``, ``#unknown-update``, ``#hang``,
``#hang-hard``, ``#garbage``, ``#flood-stderr=BYTES``, ``#oversize=BYTES``,
``#history``; then the reply streams (``#chunks=N`` / ``#updates=N`` replace the
echo, ``#delay=MS`` paces it, ``#cost=USD`` sends a ``usage_update`` with the session's
cumulative cost after each chunk, ``#crash`` exits with code 3 after its first chunk,
``#stamp`` ends each chunk with ``@`` and the agent's monotonic clock in ns at its send).
Results of tool, permission, fs and history directives are appended to the reply.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import sys
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from acp import (
    PROTOCOL_VERSION,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    run_agent,
    update_agent_message_text,
    update_user_message_text,
)
from acp.schema import (
    AgentCapabilities,
    AuthenticateResponse,
    AuthMethodAgent,
    AvailableCommand,
    AvailableCommandsUpdate,
    CloseSessionResponse,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    ForkSessionResponse,
    Implementation,
    ListSessionsResponse,
    McpCapabilities,
    PromptCapabilities,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionForkCapabilities,
    SessionInfo,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SessionResumeCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    StopReason,
    Usage,
)

from protocol.example_agent.directives import (
    parse_directives,
    prompt_text,
)
from protocol.example_agent.options import Options, parse_args
from protocol.example_agent.script import TurnScript, TurnState
from protocol.example_agent.state import SessionRecord, StateFile, Turn, utc_now

log = logging.getLogger("example_agent")

MODES = (SessionMode(id="default", name="Default"), SessionMode(id="plan", name="Plan"))
MODELS = {"example-small": "Example Small", "example-large": "Example Large"}
STDERR_WRITE = 64 * 1024
TOKEN_HELP = "Set EXAMPLE_AGENT_TOKEN in the agent's environment, or call authenticate"
SLASH_COMMANDS = [
    AvailableCommand(name="history", description="Show what this session was asked so far"),
    AvailableCommand(name="plan", description="Reply with a plan"),
]


@dataclass
class _Running:
    task: asyncio.Task[Any]
    turn: TurnState


class ExampleAgent(TurnScript):
    """Duck-typed ACP agent.

    Deliberately not an ``acp.Agent`` subclass: the Protocol's stubs would answer
    ``result: null`` for unimplemented methods instead of -32601.
    """

    def __init__(self, options: Options, stdout: asyncio.StreamWriter | None = None) -> None:
        super().__init__(options, stdout)
        self.state = StateFile(options.state_file)
        self.sessions: dict[str, SessionRecord] = {}
        self._background: set[asyncio.Future[None]] = set()  # notifications in flight
        self.running: dict[str, _Running] = {}

    # ----- lifecycle -------------------------------------------------------------------

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        """Advertise capabilities; ``--exit-during-initialize`` dies here without answering."""
        if self.options.starts_file is not None:
            with self.options.starts_file.open("a") as starts:
                starts.write(f"{os.getpid()}\n")
        if self.options.exit_during_initialize:
            log.error("exiting during initialize as requested")
            os._exit(2)
        caps = SessionCapabilities(
            list=SessionListCapabilities(),
            close=SessionCloseCapabilities(),
            resume=SessionResumeCapabilities() if self.options.resume else None,
            fork=SessionForkCapabilities() if self.options.fork else None,
        )
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=self.options.load,
                prompt_capabilities=PromptCapabilities(image=False, embedded_context=True),
                session_capabilities=caps,
                mcp_capabilities=McpCapabilities(http=self.options.http_mcp),
            ),
            agent_info=Implementation(name="example-agent", version="0.1.0"),
            auth_methods=[AuthMethodAgent(id="token", name="Token", description=TOKEN_HELP)]
            if self.options.auth_required
            else [],
        )

    def _login_file(self) -> Path:
        return self.options.state_file.with_suffix(".login")

    def _authenticated(self) -> bool:
        """A token in the environment, or a login an earlier ``authenticate`` left on disk
        (as real agents keep their OAuth credentials: every later process finds it)."""
        return bool(os.environ.get("EXAMPLE_AGENT_TOKEN")) or self._login_file().exists()

    async def authenticate(self, method_id: str, **_: Any) -> AuthenticateResponse:
        if method_id != "token":
            raise RequestError.invalid_params({"methodId": method_id, "known": ["token"]})
        self._login_file().write_text("logged in\n")
        return AuthenticateResponse()

    async def new_session(
        self, cwd: str, mcp_servers: list[Any] | None = None, **_: Any
    ) -> NewSessionResponse:
        """Create and persist a session so that a restarted process can load it."""
        if self.options.auth_required and not self._authenticated():
            raise RequestError(-32000, "Authentication required", {"authMethods": ["token"]})
        record = self._keep(SessionRecord(session_id=uuid.uuid4().hex, cwd=cwd), mcp_servers)
        self._announce_commands(record.session_id)
        return NewSessionResponse(
            session_id=record.session_id, modes=_modes(record), config_options=_config(record)
        )

    def _announce_commands(self, sid: str) -> None:
        """Like real agents (Claude Code, Codex), send the slash commands right after the
        answer to session/new, load or resume: scheduled now, it is written after the answer
        (the SDK queues the answer before this callback runs)."""
        if not self.options.slash_commands:
            return

        def send() -> None:
            update = AvailableCommandsUpdate(
                session_update="available_commands_update", available_commands=SLASH_COMMANDS
            )
            self._in_background(self._send(sid, update))

        asyncio.get_running_loop().call_soon(send)

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None, **_: Any
    ) -> LoadSessionResponse:
        """Replay the stored conversation as updates, then answer (ACP requires that order;
        ``--replay-after-answer`` answers first and replays after, like Gemini CLI)."""
        if not self.options.load:
            raise RequestError.method_not_found("session/load")
        record = self._attach(session_id, cwd)
        self.mcp_servers[session_id] = list(mcp_servers or [])
        if self.options.replay_after_answer:
            # Like the slash commands below: this callback runs after the SDK queued the answer.
            asyncio.get_running_loop().call_soon(
                lambda: self._in_background(self._replay(session_id, record))
            )
        else:
            await self._replay(session_id, record)
        self._announce_commands(session_id)
        return LoadSessionResponse(modes=_modes(record), config_options=_config(record))

    async def _replay(self, session_id: str, record: SessionRecord) -> None:
        for turn in record.history:
            await self._send(session_id, update_user_message_text(turn.user))
            if turn.reply:
                await self._send(session_id, update_agent_message_text(turn.reply))

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def resume_session(
        self, session_id: str, cwd: str, mcp_servers: list[Any] | None = None, **_: Any
    ) -> ResumeSessionResponse:
        """Attach to a stored session without replaying it."""
        if not self.options.resume:
            raise RequestError.method_not_found("session/resume")
        record = self._attach(session_id, cwd)
        self.mcp_servers[session_id] = list(mcp_servers or [])
        self._announce_commands(session_id)
        return ResumeSessionResponse(modes=_modes(record), config_options=_config(record))

    async def fork_session(
        self, session_id: str, cwd: str, mcp_servers: list[Any] | None = None, **_: Any
    ) -> ForkSessionResponse:
        """A new session with a copy of a stored one's history (``--fork``)."""
        if not self.options.fork:
            raise RequestError.method_not_found("session/fork")
        source = self.sessions.get(session_id) or self.state.get(session_id)
        if source is None:
            raise RequestError.resource_not_found(session_id)
        history = copy.deepcopy(source.history)
        record = self._keep(SessionRecord(uuid.uuid4().hex, cwd, history=history), mcp_servers)
        return ForkSessionResponse(
            session_id=record.session_id, modes=_modes(record), config_options=_config(record)
        )

    async def close_session(self, session_id: str, **_: Any) -> CloseSessionResponse:
        """Forget the session in memory (the state file keeps it for a later load)."""
        if session_id not in self.sessions:
            raise RequestError.resource_not_found(session_id)
        await self.cancel(session_id)
        del self.sessions[session_id]
        return CloseSessionResponse()

    async def list_sessions(self, cwd: str | None = None, **_: Any) -> ListSessionsResponse:
        """List stored and live sessions, newest first, optionally only those in ``cwd``."""
        merged = self.state.load_all() | self.sessions
        infos = [
            SessionInfo(session_id=r.session_id, cwd=r.cwd, title=r.title, updated_at=r.updated_at)
            for r in sorted(merged.values(), key=lambda r: r.updated_at, reverse=True)
            if cwd is None or r.cwd == cwd
        ]
        return ListSessionsResponse(sessions=infos)

    async def set_session_mode(
        self, session_id: str, mode_id: str, **_: Any
    ) -> SetSessionModeResponse:
        """Switch mode and tell the client through ``current_mode_update``."""
        record = self._live(session_id)
        if mode_id not in {m.id for m in MODES}:
            raise RequestError.invalid_params({"modeId": mode_id})
        record.mode = mode_id
        self._persist(record)
        update = CurrentModeUpdate(session_update="current_mode_update", current_mode_id=mode_id)
        await self._send(session_id, update)
        return SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **_: Any
    ) -> SetSessionConfigOptionResponse:
        """Change the model; notify with ``config_option_update`` and return all options."""
        record = self._live(session_id)
        if config_id != "model" or not isinstance(value, str) or value not in MODELS:
            raise RequestError.invalid_params({"configId": config_id, "value": value})
        record.model = value
        self._persist(record)
        options = _config(record)
        update = ConfigOptionUpdate(session_update="config_option_update", config_options=options)
        await self._send(session_id, update)
        return SetSessionConfigOptionResponse(config_options=options)

    async def cancel(self, session_id: str, **_: Any) -> None:
        """Cancel the running prompt; the SDK itself does nothing on session/cancel."""
        running = self.running.get(session_id)
        if running is None or running.turn.ignore_cancel:
            return
        running.turn.cancel_requested = True
        running.task.cancel()

    # ----- prompt turn -----------------------------------------------------------------

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        """Run one turn; returns ``cancelled`` if session/cancel arrived, even mid-stream."""
        record = self._live(session_id)
        if session_id in self.running:
            raise RequestError.invalid_request({"details": "a prompt is already running"})
        text = prompt_text(prompt)
        self._record_invocation(session_id, text)
        directives, message = parse_directives(text)
        task = asyncio.current_task()
        assert task is not None  # the SDK runs every request in its own task
        turn = TurnState(ignore_cancel=directives.hang_hard)
        self.running[session_id] = _Running(task, turn)
        stop_reason: StopReason = "end_turn"
        try:
            await self._run_turn(record, directives, message, turn)
        except asyncio.CancelledError:
            if not turn.cancel_requested:
                raise  # connection shutdown, not a session/cancel: let the task die
            task.uncancel()
            stop_reason = "cancelled"
        finally:
            self.running.pop(session_id, None)
        record.history.append(Turn(user=text, message=message, reply="".join(turn.sent)))
        self._persist(record)
        outputs = len(turn.sent)
        inputs = len(text.split())
        return PromptResponse(
            stop_reason=stop_reason,
            usage=Usage(input_tokens=inputs, output_tokens=outputs, total_tokens=inputs + outputs),
        )

    def _keep(self, record: SessionRecord, mcp_servers: list[Any] | None) -> SessionRecord:
        """A new session, live in this process and saved for a later load."""
        self.sessions[record.session_id] = record
        self.mcp_servers[record.session_id] = list(mcp_servers or [])
        self.state.save(record)
        return record

    def _attach(self, session_id: str, cwd: str) -> SessionRecord:
        """Find a session in memory or the state file and make it live in this process."""
        record = self.sessions.get(session_id) or self.state.get(session_id)
        if record is None:
            raise RequestError.resource_not_found(session_id)
        record.cwd = cwd
        self.sessions[session_id] = record
        return record

    def _live(self, session_id: str) -> SessionRecord:
        """Return a session attached to this process (new, loaded or resumed)."""
        record = self.sessions.get(session_id)
        if record is None:
            raise RequestError.resource_not_found(session_id)
        return record

    def _persist(self, record: SessionRecord) -> None:
        """Stamp and save the session (one line appended to the state journal)."""
        record.updated_at = utc_now()
        self.state.save(record)


def _modes(record: SessionRecord) -> SessionModeState:
    """The session's mode state as ACP wants it."""
    return SessionModeState(current_mode_id=record.mode, available_modes=list(MODES))


def _config(record: SessionRecord) -> list[Any]:
    """The session's config options: a single ``model`` select."""
    choices = [SessionConfigSelectOption(value=v, name=n) for v, n in MODELS.items()]
    option = SessionConfigOptionSelect(
        id="model",
        name="Model",
        category="model",
        type="select",
        current_value=record.model,
        options=choices,
    )
    return [option]


async def serve(options: Options) -> None:
    """Serve ACP on stdio until stdin closes."""
    from acp.stdio import stdio_streams

    # Own the streams (instead of letting run_agent make them) to keep the stdout
    # writer: #garbage and #crash must flush it before touching fd 1 / exiting.
    reader, writer = await stdio_streams(limit=50 * 1024 * 1024)
    agent = ExampleAgent(options, stdout=writer)
    await run_agent(cast(Any, agent), writer, reader, use_unstable_protocol=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point for ``python -m protocol.example_agent``."""
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s example-agent %(message)s"
    )
    asyncio.run(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
