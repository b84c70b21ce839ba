"""Helpers for running the control plane (``acpctl serve`` / ``acpctl batch``) in front of the
real agents: config files, the acpctl process, /proc look-ups for an agent's process tree and
reading the stand-in model server's recorded conversations."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from acp import PROTOCOL_VERSION, Client, spawn_agent_process, text_block
from acp.client.connection import ClientSideConnection
from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation

from actors.agent_profiles import AgentProfile, AgentProfiles
from actors.settings import RuntimeSettings
from protocol.agent.permissions import Decision, PermissionPolicy
from store import AgentSpec
from tests.support.direct_sql import is_postgres
from tests.support.store_contents import stored_bytes

from .agents import BIN as NODE_BIN
from .agents import AgentLaunch
from .client import RecordingClient
from .model_requests import RecordedRequest, anthropic_text, gemini_text, openai_item_text

REPO = Path(__file__).resolve().parents[2]
MARKER = "ACP_REAPER_ID"
API_OF = {"claude": "anthropic", "codex": "openai", "gemini": "gemini"}
SLOW_TOOL = "RUN sleep 4; echo ran >> side.txt"


# -- configuration and the acpctl process ------------------------------------------------------


def _toml(value: Any) -> str:
    """A TOML value for strings, booleans, lists of strings and flat string tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


@dataclass
class ControlPlaneFiles:
    """One store and one config file for one agent, in ``root``; the store is a SQLite file
    there, or ``db_url``'s PostgreSQL database (the ``db`` fixture's other backend)."""

    root: Path
    agent: str
    db_url: str | None = None

    @classmethod
    def on(cls, root: Path, agent: str, db: str) -> ControlPlaneFiles:
        """On the ``db`` fixture's store: its PostgreSQL database, or a file in ``root``."""
        return cls(root, agent, db if is_postgres(db) else None)

    @property
    def config(self) -> Path:
        return self.root / "acpctl.toml"

    @property
    def db(self) -> str:
        return self.db_url or str(self.root / "cp.db")

    @property
    def agent_logs(self) -> Path:
        """Next to the store file; with PostgreSQL, in the data directory of acpctl's HOME."""
        if self.db_url is None:
            return self.root / "agent-logs"
        return self.root / "cp-home" / ".local" / "share" / "acpctl" / "agent-logs"

    def store_files(self) -> list[Path]:
        """The store file and its -wal / -shm companions that exist now (none: PostgreSQL)."""
        if self.db_url is not None:
            return []
        paths = [Path(self.db), Path(f"{self.db}-wal"), Path(f"{self.db}-shm")]
        return [p for p in paths if p.exists()]

    def store_contents(self) -> list[tuple[str, bytes]]:
        """Everything the store holds, as bytes to search: each file's bytes, or (PostgreSQL)
        every value of every table (``tests/support/store_contents.py``)."""
        if self.db_url is None:
            return [(str(p), p.read_bytes()) for p in self.store_files()]
        return [(f"database {self.db_url}", stored_bytes(self.db_url))]

    def write_config(
        self,
        launch: AgentLaunch,
        permission: str = "ask",
        by_name: bool = False,
        top: dict[str, str] | None = None,
    ) -> None:
        """``[agents.NAME]`` with the harness's argv and every variable of its env (HOME too);
        Gemini CLI gets ``fs = false`` (it cannot create files through a client's fs).
        ``by_name``: no command: NAME (claude, codex, gemini) resolves through the registry
        snapshot to the installed package (``env()`` puts node_modules/.bin on PATH).
        ``top``: top-level keys (``continuation_prompt``...)."""
        command = [] if by_name else [f"command = {_toml(list(launch.argv))}"]
        lines = [
            *(f"{key} = {_toml(value)}" for key, value in (top or {}).items()),
            "[permissions]",
            f"default = {_toml(permission)}",
            "",
            f"[agents.{self.agent}]",
            *command,
            f"env = {_toml(dict(launch.env))}",
            f"fs = {_toml(self.agent != 'gemini')}",
            "terminals = false",
            "",
        ]
        self.root.mkdir(parents=True, exist_ok=True)
        self.config.write_text("\n".join(lines))

    def env(self) -> dict[str, str]:
        """The acpctl process's own environment: no API key, no agent variables."""
        home = self.root / "cp-home"
        home.mkdir(parents=True, exist_ok=True)
        # The installed agents' executables, as a user's global npm install would put them
        # on PATH: how ``--agent claude`` finds them (control_plane/agents/install.py).
        path = os.pathsep.join((str(NODE_BIN), os.environ.get("PATH", "/usr/bin:/bin")))
        return {
            "PATH": path,
            "PYTHONPATH": str(REPO),
            "HOME": str(home),
            "LANG": "C.UTF-8",
        }

    def argv(self, *args: str, options_after: bool = False) -> list[str]:
        """``acpctl --config C --db D ARGS``; ``options_after``: ``acpctl ARGS[0] --config C
        --db D ARGS[1:]`` (both spellings must mean the same)."""
        options = ["--config", str(self.config), "--db", str(self.db)]
        if options_after:
            return [sys.executable, "-m", "control_plane.cli", args[0], *options, *args[1:]]
        return [sys.executable, "-m", "control_plane.cli", *options, *args]

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            env=self.env(),
            cwd=str(self.root),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen(self, *args: str, log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as fh:
            return subprocess.Popen(
                self.argv(*args),
                env=self.env(),
                cwd=str(self.root),
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
            )

    def json(self, *args: str) -> Any:
        done = self.run(*args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        text = done.stdout.strip()
        try:
            return json.loads(text)
        except ValueError:
            return [json.loads(line) for line in text.splitlines() if line.strip()]


def client_capabilities(fs: bool = True) -> ClientCapabilities:
    return ClientCapabilities(
        fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs), terminal=False
    )


@asynccontextmanager
async def serve_connection(
    cp: ControlPlaneFiles, client: RecordingClient, cwd: Path, options_after: bool = False
) -> AsyncIterator[tuple[ClientSideConnection, asyncio.subprocess.Process, Any]]:
    """``acpctl --config C --db D serve --agent NAME`` driven as an ACP agent over stdio."""
    argv = cp.argv("serve", "--agent", cp.agent, options_after=options_after)
    with (cp.root / "serve.log").open("ab") as log:
        # RecordingClient is duck-typed (not the whole acp.Client protocol): see client.py.
        async with spawn_agent_process(
            cast(Client, client),
            argv[0],
            *argv[1:],
            env=cp.env(),
            cwd=str(cwd),
            transport_kwargs={
                "limit": 16 * 1024 * 1024,
                "stderr": log.fileno(),
                "shutdown_timeout": 5,
            },
        ) as (conn, proc):
            init = await asyncio.wait_for(
                conn.initialize(
                    protocol_version=PROTOCOL_VERSION,
                    client_capabilities=client_capabilities(cp.agent != "gemini"),
                    client_info=Implementation(name="acp-control-plane-tests", version="0"),
                ),
                90,
            )
            yield conn, proc, init


async def prompt(conn: ClientSideConnection, session_id: str, text: str, timeout: float = 90):
    return await asyncio.wait_for(
        conn.prompt(session_id=session_id, prompt=[text_block(text)]), timeout
    )


# -- a control plane in the test's own process -------------------------------------------------


def in_process(
    name: str, launch: AgentLaunch, log_dir: Path, sessions_per_process: int = 1, **settings: Any
) -> tuple[RuntimeSettings, AgentSpec]:
    """Settings and an agent spec for ``ControlPlane.open`` in the test process with a real
    agent: permissions allowed, the agent's environment in its profile (fs off for Gemini
    CLI, which cannot create files through a client's fs), short sweeps and shutdowns; more
    ``RuntimeSettings`` fields as keywords."""
    profile = AgentProfile(
        env=dict(launch.env), fs=name != "gemini", sessions_per_process=sessions_per_process
    )
    runtime = RuntimeSettings(
        permission_policy=PermissionPolicy(Decision.ALLOW),
        sweep_interval_s=0.2,
        agent_shutdown_timeout_s=2,
        agent_profiles=AgentProfiles({name: profile}),
        log_dir=str(log_dir),
        **settings,
    )
    return runtime, AgentSpec(name, tuple(launch.argv), env=tuple(launch.env.items()))


# -- processes -------------------------------------------------------------------------------


def environ(pid: int) -> dict[str, str] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def _state(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].split()[0].decode()


def ppid(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(raw[raw.rfind(b")") + 2 :].split()[1])


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def is_descendant(pid: int, ancestor: int) -> bool:
    seen = 0
    while pid > 1 and seen < 64:
        if pid == ancestor:
            return True
        parent = ppid(pid)
        if parent is None:
            return False
        pid, seen = parent, seen + 1
    return False


def live_pids() -> Iterable[int]:
    for name in os.listdir("/proc"):
        if name.isdigit():
            pid = int(name)
            if pid != os.getpid() and _state(pid) not in (None, "Z"):
                yield pid


def marked(marker: str | None = None) -> dict[int, str]:
    """Live processes carrying ``ACP_REAPER_ID`` (all, or those with this value): pid ->
    value."""
    found = {}
    for pid in live_pids():
        env = environ(pid)
        value = None if env is None else env.get(MARKER)
        if value is not None and (marker is None or value == marker):
            found[pid] = value
    return found


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            return value
        time.sleep(interval)


def tool_process(cwd: Path, program: str = "sleep") -> tuple[int, str] | None:
    """A live ``program`` process running in ``cwd`` that carries the reaper marker."""
    for pid, value in marked().items():
        args = cmdline(pid)
        if not args or os.path.basename(args[0]) != program:
            continue
        try:
            here = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if Path(here) == cwd.resolve():
            return pid, value
    return None


def gone_within(marker: str, seconds: float) -> tuple[bool, float, dict[int, list[str]]]:
    """Poll /proc until no live process carries ``marker``: (gone, elapsed, leftovers)."""
    t0 = time.monotonic()
    while True:
        left = marked(marker)
        elapsed = time.monotonic() - t0
        if not left:
            return True, elapsed, {}
        if elapsed > seconds:
            return False, elapsed, {pid: cmdline(pid) for pid in left}
        time.sleep(0.01)


# -- the model server's recorded conversations -----------------------------------------------


def user_texts(req: RecordedRequest) -> list[str]:
    """The text of each user message in one recorded model request (tool results left out;
    a user message with no text at all is left out)."""
    body = req.body if isinstance(req.body, dict) else {}
    texts: list[str] = []
    if req.api == "anthropic":
        for msg in body.get("messages") or []:
            if msg.get("role") == "user":
                texts.append(anthropic_text(msg.get("content")))
    elif req.api == "openai":
        items = body.get("input") or []
        if isinstance(items, str):
            return [items]
        for item in items:
            if (
                isinstance(item, dict)
                and item.get("role") == "user"
                and item.get("type", "message") == "message"
            ):
                texts.append(openai_item_text(item))
    elif req.api == "gemini":
        for c in body.get("contents") or []:
            if c.get("role", "user") == "user":
                texts.append(gemini_text(c.get("parts")))
    return [t for t in texts if t.strip()]


def conversations(reqs: list[RecordedRequest]) -> list[list[str]]:
    """User texts of every request that carries a conversation (streamed turns)."""
    return [texts for r in reqs if r.method == "POST" and (texts := user_texts(r))]


def duplicated(reqs: list[RecordedRequest], text: str) -> list[str]:
    """Requests whose conversation holds a user message with ``text`` more than once (the
    prompt was added to the agent's conversation again)."""
    problems = []
    for i, texts in enumerate(conversations(reqs)):
        count = sum(t.count(text) for t in texts)
        if count > 1:
            problems.append(f"request {i}: user text {text!r} appears {count} times: {texts}")
    return problems


def turn_starts(reqs: list[RecordedRequest], text: str) -> list[int]:
    """Indexes of the requests that start a turn for ``text``: their conversation ends with a
    user message without tool results whose last text block holds ``text`` (the prompt sent
    to the model). The last block, because Gemini CLI merges a restored user message that got
    no answer with the next prompt into one content (``[..., "RUN ...", "SAY after"]``)."""
    found = []
    for i, req in enumerate(reqs):
        body = req.body if isinstance(req.body, dict) else {}
        last: Any = None
        if req.api == "anthropic" and body.get("messages"):
            msg = body["messages"][-1]
            blocks = msg.get("content")
            tool = isinstance(blocks, list) and any(
                isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks
            )
            if msg.get("role") == "user" and not tool:
                last = _last_text(blocks, lambda b: b.get("type") == "text")
        elif req.api == "openai" and isinstance(body.get("input"), list) and body["input"]:
            item = body["input"][-1]
            if isinstance(item, dict) and item.get("role") == "user":
                last = openai_item_text(item)
        elif req.api == "gemini" and body.get("contents"):
            content = body["contents"][-1]
            parts = content.get("parts") or []
            tool = any(isinstance(p, dict) and "functionResponse" in p for p in parts)
            if content.get("role", "user") == "user" and not tool:
                last = _last_text(parts, lambda p: "text" in p)
        if last is not None and text in last:
            found.append(i)
    return found


def _last_text(blocks: Any, is_text: Callable[[dict[str, Any]], bool]) -> str:
    if isinstance(blocks, str):
        return blocks
    texts = [b.get("text", "") for b in blocks or [] if isinstance(b, dict) and is_text(b)]
    texts = [t for t in texts if t.strip()]
    return texts[-1] if texts else ""


def api_key_of(req: RecordedRequest) -> str:
    """The API key a recorded request carried (the header each API uses)."""
    h = {k.lower(): v for k, v in req.headers.items()}
    auth = h.get("authorization", "").removeprefix("Bearer ").strip()
    return h.get("x-api-key") or h.get("x-goog-api-key") or req.query.get("key", [""])[0] or auth


def mcp_server_script(path: Path) -> Path:
    """A tiny stdio MCP server (stdlib only): appends one JSON line (pid, ppid, marker, argv)
    to the file named by its first argument when it starts, then answers ``initialize``,
    ``tools/list`` (one tool) and ``tools/call`` until stdin closes."""
    path.write_text(_MCP_SERVER)
    return path


_MCP_SERVER = r"""
import json, os, sys

log = sys.argv[1]
with open(log, "a") as fh:
    fh.write(json.dumps({"pid": os.getpid(), "ppid": os.getppid(),
                         "marker": os.environ.get("ACP_REAPER_ID"), "argv": sys.argv}) + "\n")

def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()

TOOL = {"name": "probe", "description": "Answers pong.",
        "inputSchema": {"type": "object", "properties": {}}}
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if "id" not in msg:
        continue
    method, mid = msg.get("method"), msg["id"]
    if method == "initialize":
        version = (msg.get("params") or {}).get("protocolVersion", "2024-11-05")
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": version, "capabilities": {"tools": {}},
            "serverInfo": {"name": "probe", "version": "0"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [TOOL]}})
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": mid,
              "result": {"content": [{"type": "text", "text": "pong"}]}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
"""


def mcp_starts(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
