"""A deterministic, offline ACP agent for demos, tests and users without an API key.

Run it with ``python -m protocol.example_agent [flags]``; it speaks ACP on stdio
through the official SDK and logs to stderr only (stdout carries the protocol).

A prompt's words that start with ``#`` are directives, the rest is "the message".
With no directive the agent thinks ``Considering: <message>`` and streams
``Echo: <message>`` word by word.  Directives, in the order their effects happen:

``#updates=N`` (no thought chunk), ``#tool`` / ``#permission`` (permission request,
then tool call), ``#read=PATH``, ``#readlines=PATH:LINE:LIMIT``,
``#write=PATH:CONTENT``, ``#plan``, ``#title=A_B``, ``#unknown-update``, ``#hang``,
``#hang-hard``, ``#garbage``, ``#flood-stderr=BYTES``, ``#oversize=BYTES``,
``#history``; then the reply streams (``#chunks=N`` / ``#updates=N`` replace the
echo, ``#delay=MS`` paces it, ``#crash`` exits with code 3 after its first chunk).
Results of tool, permission, fs and history directives are appended to the reply.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
import uuid
from dataclasses import dataclass, field
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
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
    update_user_message_text,
)
from acp.agent.connection import AgentSideConnection
from acp.schema import (
    AgentCapabilities,
    AgentPlanUpdate,
    AllowedOutcome,
    AuthenticateResponse,
    AuthMethodAgent,
    AvailableCommand,
    AvailableCommandsUpdate,
    CloseSessionResponse,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    EmbeddedResourceContentBlock,
    Implementation,
    ListSessionsResponse,
    PermissionOption,
    PlanEntry,
    PromptCapabilities,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionInfo,
    SessionInfoUpdate,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SessionResumeCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    StopReason,
    TextContentBlock,
    TextResourceContents,
    ToolCallUpdate,
    Usage,
)

from protocol.example_agent import mcp as example_agent_mcp
from protocol.example_agent.state import (
    SessionRecord,
    StateFile,
    Turn,
    append_invocation,
    utc_now,
)

log = logging.getLogger("example_agent")

MODES = (SessionMode(id="default", name="Default"), SessionMode(id="plan", name="Plan"))
MODELS = {"example-small": "Example Small", "example-large": "Example Large"}
STDERR_WRITE = 64 * 1024


@dataclass
class Options:
    """Command-line behaviour switches (see :func:`parse_args`)."""

    state_file: Path
    invocations_file: Path | None = None
    exit_during_initialize: bool = False
    # Refuse session/new with -32000 "Authentication required" unless EXAMPLE_AGENT_TOKEN
    # is set (what an agent without a configured API key does).
    auth_required: bool = False
    load: bool = True
    resume: bool = True
    chunk_delay_ms: int = 0


@dataclass
class Directives:
    """The ``#`` words of one prompt, parsed."""

    chunks: int | None = None
    updates: int | None = None
    delay_ms: int | None = None
    tool: bool = False
    permission: bool = False
    read: str | None = None
    readlines: tuple[str, int, int] | None = None
    write: tuple[str, str] | None = None
    plan: bool = False
    title: str | None = None
    unknown_update: bool = False
    hang: bool = False
    hang_hard: bool = False
    crash: bool = False
    garbage: bool = False
    flood_stderr: int | None = None
    oversize: int | None = None
    history: bool = False
    mcp_servers: bool = False  # reply with the names of the MCP servers offered
    # MCP tool calls through the client's mcpServers: (tool name, arguments) in order
    mcp_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


_FLAGS = {"tool", "permission", "plan", "hang", "crash", "garbage", "history"}


def default_state_file() -> Path:
    """Where the agent keeps its sessions when no ``--state-file`` is given: the user's state
    directory, never the caller's cwd (an agent started in a project must not leave files
    in it)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "acpctl" / "example-agent-sessions.json"


def parse_directives(text: str) -> tuple[Directives, str]:
    """Split prompt text into directives and the message (non-directive words, space-joined).

    A malformed directive value answers -32602 rather than silently doing something else.
    """
    d, words = Directives(), []
    for word in text.split():
        if not word.startswith("#"):
            words.append(word)
            continue
        name, _, value = word[1:].partition("=")
        try:
            _apply_directive(d, name, value)
        except ValueError as exc:
            raise RequestError.invalid_params({"directive": word, "details": str(exc)}) from exc
    return d, " ".join(words)


def _apply_directive(d: Directives, name: str, value: str) -> None:
    """Set the field for one ``#name=value`` word; unknown names are logged and ignored."""
    if name in _FLAGS:
        setattr(d, name, True)
    elif name in ("unknown-update", "hang-hard", "mcp-servers"):
        setattr(d, name.replace("-", "_"), True)
    elif name in ("chunks", "updates", "delay", "flood-stderr", "oversize"):
        number = int(value)
        if number < 0:
            raise ValueError("must be >= 0")
        setattr(d, {"delay": "delay_ms", "flood-stderr": "flood_stderr"}.get(name, name), number)
    elif name == "read":
        d.read = value
    elif name == "readlines":
        path, line, limit = value.rsplit(":", 2)
        d.readlines = (path, int(line), int(limit))
    elif name == "write":
        path, sep, content = value.partition(":")
        if not sep:
            raise ValueError("expected PATH:CONTENT")
        d.write = (path, content)
    elif name == "title":
        d.title = value.replace("_", " ")
    elif name in ("spawn", "spawn-session"):
        mode = "session" if name == "spawn-session" else "run"
        for task in filter(None, value.split(",")):
            d.mcp_calls.append(("spawn_subagent", {"task": task.replace("_", " "), "mode": mode}))
    elif name == "list-subagents":
        d.mcp_calls.append(("list_subagents", {}))
    elif name == "subagent-result":
        d.mcp_calls.append(("subagent_result", {"id": value, "wait": 30}))
    elif name == "cancel-subagent":
        d.mcp_calls.append(("cancel_subagent", {"id": value}))
    elif name == "send-subagent":
        child, sep, message = value.partition(":")
        if not sep:
            raise ValueError("expected ID:MESSAGE")
        d.mcp_calls.append(
            ("send_to_subagent", {"id": child, "message": message.replace("_", " ")})
        )
    else:
        log.info("ignoring unknown directive #%s", name)


TOKEN_HELP = "Set EXAMPLE_AGENT_TOKEN in the agent's environment, or call authenticate"
SLASH_COMMANDS = [
    AvailableCommand(name="history", description="Show what this session was asked so far"),
    AvailableCommand(name="plan", description="Reply with a plan"),
]


def prompt_text(blocks: list[Any]) -> str:
    """Join the text of text blocks and embedded text resources (other blocks carry none)."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, EmbeddedResourceContentBlock) and isinstance(
            block.resource, TextResourceContents
        ):
            parts.append(block.resource.text)
    return "\n".join(parts)


def split_words(text: str) -> list[str]:
    """Chunk a reply into words, each keeping the whitespace that follows it."""
    return re.findall(r"\S+\s*", text)


@dataclass
class TurnState:
    """What one running prompt has produced so far (kept for usage and persistence)."""

    sent: list[str] = field(default_factory=list)
    cancel_requested: bool = False
    ignore_cancel: bool = False


@dataclass
class _Running:
    task: asyncio.Task[Any]
    turn: TurnState


class ExampleAgent:
    """Duck-typed ACP agent.

    Deliberately not an ``acp.Agent`` subclass: the Protocol's stubs would answer
    ``result: null`` for unimplemented methods instead of -32601.
    """

    def __init__(self, options: Options, stdout: asyncio.StreamWriter | None = None) -> None:
        self.options = options
        self.state = StateFile(options.state_file)
        self.sessions: dict[str, SessionRecord] = {}
        self.mcp_servers: dict[str, list[Any]] = {}  # per session, from new/load/resume
        self._background: set[asyncio.Future[None]] = set()  # notifications in flight
        self.running: dict[str, _Running] = {}
        self._stdout = stdout
        self._conn: AgentSideConnection | None = None

    def on_connect(self, conn: AgentSideConnection) -> None:
        """Keep the connection: it is how the agent calls the client."""
        self._conn = conn

    @property
    def conn(self) -> AgentSideConnection:
        """The client connection (set by the SDK before any request arrives)."""
        if self._conn is None:
            raise RuntimeError("not connected")
        return self._conn

    # ----- lifecycle -------------------------------------------------------------------

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        """Advertise capabilities; ``--exit-during-initialize`` dies here without answering."""
        if self.options.exit_during_initialize:
            log.error("exiting during initialize as requested")
            os._exit(2)
        caps = SessionCapabilities(
            list=SessionListCapabilities(),
            close=SessionCloseCapabilities(),
            resume=SessionResumeCapabilities() if self.options.resume else None,
        )
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=self.options.load,
                prompt_capabilities=PromptCapabilities(image=False, embedded_context=True),
                session_capabilities=caps,
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
        record = SessionRecord(session_id=uuid.uuid4().hex, cwd=cwd)
        self.sessions[record.session_id] = record
        self.mcp_servers[record.session_id] = list(mcp_servers or [])
        self.state.save(record)
        self._announce_commands(record.session_id)
        return NewSessionResponse(
            session_id=record.session_id, modes=_modes(record), config_options=_config(record)
        )

    def _announce_commands(self, sid: str) -> None:
        """Like real agents (Claude Code, Codex), send the slash commands right after the
        answer to session/new, load or resume: scheduled now, it is written after the answer
        (the SDK queues the answer before this callback runs)."""

        def send() -> None:
            update = AvailableCommandsUpdate(
                session_update="available_commands_update", available_commands=SLASH_COMMANDS
            )
            task = asyncio.ensure_future(self._send(sid, update))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

        asyncio.get_running_loop().call_soon(send)

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None, **_: Any
    ) -> LoadSessionResponse:
        """Replay the stored conversation as updates, then answer (ACP requires that order)."""
        if not self.options.load:
            raise RequestError.method_not_found("session/load")
        record = self._attach(session_id, cwd)
        self.mcp_servers[session_id] = list(mcp_servers or [])
        for turn in record.history:
            await self._send(session_id, update_user_message_text(turn.user))
            if turn.reply:
                await self._send(session_id, update_agent_message_text(turn.reply))
        self._announce_commands(session_id)
        return LoadSessionResponse(modes=_modes(record), config_options=_config(record))

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

    async def _run_turn(
        self, record: SessionRecord, d: Directives, message: str, turn: TurnState
    ) -> None:
        """Apply the directives in their documented order, then stream the reply."""
        sid = record.session_id
        if d.updates is None:
            await self._send(sid, update_agent_thought_text(f"Considering: {message}"))
        extras: list[str] = []
        if d.tool or d.permission:
            extras += await self._tool_call(sid, f"tool-{len(record.history) + 1}", d, message)
        extras += await self._file_ops(record, d)
        await self._notices(record, d)
        if d.hang or d.hang_hard:
            await asyncio.Event().wait()  # hang-hard: cancel() skips it via ignore_cancel
        if d.garbage:
            await self._write_stdout_raw(b"this is not json\n")
        if d.flood_stderr:
            _flood_stderr(d.flood_stderr)
        if d.oversize is not None:
            await self._chunk(sid, "x" * d.oversize, turn)
        if d.history:
            extras.append("history: " + " | ".join(t.message for t in record.history))
        if d.mcp_servers:
            names = [str(getattr(s, "name", "?")) for s in self.mcp_servers.get(sid, [])]
            extras.append("mcp servers: " + ", ".join(names))
        if d.mcp_calls:
            extras += await self._mcp_calls(sid, d.mcp_calls)
        await self._stream(sid, _reply_chunks(d, message, extras), d, turn)

    async def _mcp_calls(self, sid: str, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
        """Call MCP tools of the client's first stdio server, each shown as a tool call."""
        server = example_agent_mcp.stdio_server(self.mcp_servers.get(sid, []))
        if server is None:
            return ["mcp: no MCP server was offered"]
        results: list[str] = []
        async with example_agent_mcp.mcp_session(server) as session:
            for n, (tool, arguments) in enumerate(calls, start=1):
                call_id = f"mcp-{uuid.uuid4().hex[:8]}-{n}"
                await self._send(
                    sid,
                    start_tool_call(
                        call_id, tool, kind="other", status="in_progress", raw_input=arguments
                    ),
                )
                text = await example_agent_mcp.call(session, tool, arguments)
                failed = text.startswith("error:")
                await self._send(
                    sid,
                    update_tool_call(
                        call_id,
                        status="failed" if failed else "completed",
                        content=[tool_content(text_block(text))],
                    ),
                )
                results.append(f"{tool}: {text}")
        return results

    async def _tool_call(self, sid: str, tool_id: str, d: Directives, message: str) -> list[str]:
        """Ask permission first when requested, then report the tool call's life cycle."""
        extras: list[str] = []
        allowed = True
        if d.permission:
            outcome = await self._ask_permission(sid, tool_id, message)
            extras.append(f"permission: {outcome}")
            allowed = outcome == "allowed"
        await self._send(
            sid,
            start_tool_call(
                tool_id, "echo-tool", kind="read", status="pending", raw_input={"message": message}
            ),
        )
        if not allowed:
            await self._send(sid, update_tool_call(tool_id, status="failed"))
            return extras
        await self._send(sid, update_tool_call(tool_id, status="in_progress"))
        output = tool_content(text_block(f"tool output: {message}"))
        await self._send(sid, update_tool_call(tool_id, status="completed", content=[output]))
        return extras

    async def _ask_permission(self, sid: str, tool_id: str, message: str) -> str:
        """Return ``allowed``, ``rejected`` or ``cancelled`` (a client error counts as rejected)."""
        options = [
            PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
            PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
        ]
        call = ToolCallUpdate(
            tool_call_id=tool_id, title="echo-tool", kind="read", raw_input={"message": message}
        )
        try:
            reply = await self.conn.request_permission(
                session_id=sid, tool_call=call, options=options
            )
        except RequestError as exc:
            log.warning("request_permission failed: %s %s", exc.code, exc)
            return "rejected"
        if isinstance(reply.outcome, AllowedOutcome):
            return "allowed" if reply.outcome.option_id == "allow" else "rejected"
        return "cancelled"

    async def _file_ops(self, record: SessionRecord, d: Directives) -> list[str]:
        """Run the fs directives through the client; errors become reply text, not crashes."""
        extras: list[str] = []
        reads: list[tuple[str, int | None, int | None]] = []
        if d.read is not None:
            reads.append((d.read, None, None))
        if d.readlines is not None:
            reads.append(d.readlines)
        for path, line, limit in reads:
            try:
                got = await self.conn.read_text_file(
                    session_id=record.session_id, path=_abs(record, path), line=line, limit=limit
                )
                extras.append(f"read: {got.content}")
            except RequestError as exc:
                extras.append(f"read error: {exc.code} {exc}")
        if d.write is not None:
            path, content = d.write
            try:
                await self.conn.write_text_file(
                    session_id=record.session_id, path=_abs(record, path), content=content
                )
                extras.append(f"wrote: {path}")
            except RequestError as exc:
                extras.append(f"write error: {exc.code} {exc}")
        return extras

    async def _notices(self, record: SessionRecord, d: Directives) -> None:
        """Send the plan, title and vendor-specific updates requested by directives."""
        sid = record.session_id
        if d.plan:
            entries = [
                PlanEntry(content="Read the message", priority="high", status="completed"),
                PlanEntry(content="Echo the message", priority="medium", status="in_progress"),
            ]
            await self._send(sid, AgentPlanUpdate(session_update="plan", entries=entries))
        if d.title is not None:
            record.title = d.title
            info = SessionInfoUpdate(
                session_update="session_info_update", title=d.title, updated_at=utc_now()
            )
            await self._send(sid, info)
        if d.unknown_update:
            # Raw engine call: the typed API would refuse an update kind the schema lacks.
            update = {"sessionUpdate": "vendor_example_kind", "vendor": {"n": 1}}
            await self.conn._conn.send_notification(
                "session/update", {"sessionId": sid, "update": update}
            )

    async def _stream(self, sid: str, chunks: list[str], d: Directives, turn: TurnState) -> None:
        """Send reply chunks, pausing between them; ``#crash`` dies after the first one."""
        delay = (d.delay_ms if d.delay_ms is not None else self.options.chunk_delay_ms) / 1000
        for index, chunk in enumerate(chunks):
            if index and delay:
                await asyncio.sleep(delay)
            await self._chunk(sid, chunk, turn)
            if d.crash:
                await self._crash()
        if d.crash:  # an empty reply (e.g. #chunks=0) still crashes
            await self._crash()

    async def _crash(self) -> None:
        """Exit with code 3 at once (no cleanup), after the frames sent so far are out."""
        await self._flush_stdout()
        log.error("crashing as requested (#crash)")
        os._exit(3)

    async def _chunk(self, sid: str, text: str, turn: TurnState) -> None:
        """Send one agent_message_chunk and remember it (usage, persistence)."""
        await self._send(sid, update_agent_message_text(text))
        turn.sent.append(text)

    # ----- helpers ---------------------------------------------------------------------

    async def _send(self, sid: str, update: Any) -> None:
        """Send one typed session/update notification."""
        await self.conn.session_update(session_id=sid, update=update)

    async def _flush_stdout(self) -> None:
        """Wait until every frame handed to the pipe transport has reached the fd.

        The SDK resolves a send once ``drain()`` returns, which can leave bytes in the
        transport buffer; raw fd writes and ``os._exit`` must not overtake them.
        """
        if self._stdout is None:
            return
        while self._stdout.transport.get_write_buffer_size():
            await asyncio.sleep(0.001)

    async def _write_stdout_raw(self, data: bytes) -> None:
        """Write bytes straight to fd 1 between two frames (never inside one)."""
        await self._flush_stdout()
        os.write(1, data)

    def _record_invocation(self, sid: str, text: str) -> None:
        """Durably log the prompt before any update goes out (crash tests count these)."""
        log.info("prompt session=%s text=%r", sid, text[:200])
        if self.options.invocations_file is not None:
            entry = {"sessionId": sid, "message": text, "pid": os.getpid()}
            append_invocation(self.options.invocations_file, entry)

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


def _abs(record: SessionRecord, path: str) -> str:
    """ACP file paths must be absolute; resolve relative ones against the session cwd."""
    return path if os.path.isabs(path) else os.path.join(record.cwd, path)


def _reply_chunks(d: Directives, message: str, extras: list[str]) -> list[str]:
    """Build the reply: counted chunks or the echo, followed by directive results."""
    if d.updates is not None:
        base = [str(i) for i in range(d.updates)]
    elif d.chunks is not None:
        base = [f"c{i} " for i in range(d.chunks)]
    else:
        return split_words(" ".join([f"Echo: {message}", *extras]))
    if extras:
        if base:  # "#updates" chunks carry no trailing space; keep the extras a separate word
            base[-1] = base[-1].rstrip() + " "
        base += split_words(" ".join(extras))
    return base


def _flood_stderr(total: int) -> None:
    """Write ``total`` bytes to fd 2 in 64 KiB writes (clients must drain stderr)."""
    block = b"e" * STDERR_WRITE
    left = total
    while left > 0:
        left -= os.write(2, block[: min(left, STDERR_WRITE)])


def parse_args(argv: list[str] | None = None) -> Options:
    """Parse command-line flags; env vars supply the file defaults."""
    p = argparse.ArgumentParser(prog="python -m protocol.example_agent", description=__doc__)
    p.add_argument("--state-file", type=Path, default=None)
    p.add_argument("--invocations-file", type=Path, default=None)
    p.add_argument("--exit-during-initialize", action="store_true")
    p.add_argument("--auth-required", action="store_true")
    p.add_argument("--no-load", action="store_true")
    p.add_argument("--no-resume", action="store_true")
    p.add_argument("--chunk-delay-ms", type=int, default=0)
    a = p.parse_args(argv)
    state = a.state_file or Path(os.environ.get("EXAMPLE_AGENT_STATE") or default_state_file())
    invocations = a.invocations_file or os.environ.get("EXAMPLE_AGENT_INVOCATIONS") or None
    return Options(
        state_file=Path(state),
        invocations_file=Path(invocations) if invocations else None,
        exit_during_initialize=a.exit_during_initialize,
        auth_required=a.auth_required,
        load=not a.no_load,
        resume=not a.no_resume,
        chunk_delay_ms=a.chunk_delay_ms,
    )


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
