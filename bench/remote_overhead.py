"""What the network front end costs: ``acpctl serve --listen`` over WebSocket against
``acpctl serve`` on stdio, and what it holds up under many connections.

What is measured
----------------
(a) *Per turn*: one ``#chunks=N`` turn (default 100) of a stamp agent (``bench/
stamp_agent.py``: standard library, each chunk carries the wall-clock time at which the
agent wrote it), through serve on stdio and through serve --listen over WebSocket on
127.0.0.1, the same SDK client on both (its stdio transport, its WebSocket transport).
Each side is one serve process with its own store and one session, given ``--warmup``
untimed turns, then the sides alternate turn by turn. Reported: the median ms per turn of
each side, the ratio of medians (WebSocket / stdio; the issue's target is at most 1.1x) and
the median of the paired per-round ratios; and per side the p50 and p99 of each update's
added latency (the agent's write to the client's read, both on this machine's clock). A
direct SDK client of the stamp agent is the third column, for scale.

(b) *Many connections*: ``--connections`` WebSocket connections (default 200) on
``--sessions`` sessions (default 20): per session one connection prompts, the others watch.
``--rounds`` rounds of one ``#chunks=N`` turn on every session at once. Every connection
checks that it got every update of every turn once and in order (by event position);
reported: updates delivered, wall time, p50/p99 added latency over all of them.

(c) *Idle connections*: the server's resident memory before and after opening
``--connections`` initialized, idle WebSocket connections; reported per connection.

(d) *Watched*: one busy session's turns with nobody else watching, with a WebSocket client
following it (what the console does), and, when Playwright and a Chromium are installed,
with the console itself open on it in a headless Chromium (against the same page on
about:blank). Blocks of 5 turns alternate; medians and the ratio to the unwatched side.

Run from the repository root::

    python bench/remote_overhead.py                  # ~1-2 minutes
    python bench/remote_overhead.py --turns 40 --connections 100 --json > remote.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:  # ahead of bench/ itself, whose actors.py is not the package
    sys.path.insert(0, _REPO_ROOT)

import websockets  # noqa: E402
from acp import PROTOCOL_VERSION, spawn_agent_process, text_block  # noqa: E402
from acp.client.connection import ClientSideConnection  # noqa: E402
from acp.schema import ClientCapabilities  # noqa: E402
from acp.ws import create_websocket_stream  # noqa: E402

from bench._common import (  # noqa: E402
    add_turn_arguments,
    child_env,
    machine_info,
    median,
    percentile,
    positive_int,
    print_turn_table,
    progress,
    turn_sides,
)
from control_plane.tokens import create_token  # noqa: E402
from store import Store  # noqa: E402

STAMP_AGENT = f"{sys.executable} -I -S {os.path.join(_REPO_ROOT, 'bench', 'stamp_agent.py')}"
STAMP = re.compile(r"t=(\d+)")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# -- clients ---------------------------------------------------------------------------------


class SdkSide:
    """The SDK's client, on a subprocess that speaks ACP on stdio (serve, or the agent), or
    on serve --listen through the SDK's own WebSocket transport: the same client code on
    every side, so only the server side differs."""

    def __init__(self) -> None:
        self.stamps: list[int] = []
        self.latencies_ms: list[float] = []

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        received = time.time_ns()
        text = getattr(getattr(update, "content", None), "text", "") or ""
        found = STAMP.match(text)
        if found:
            self.stamps.append(int(found.group(1)))
            self.latencies_ms.append((received - int(found.group(1))) / 1e6)

    async def start(self, stack: AsyncExitStack, argv: list[str], workdir: str) -> None:
        conn, _process = await stack.enter_async_context(
            spawn_agent_process(
                self,  # type: ignore[arg-type]  # duck-typed client
                argv[0],
                *argv[1:],
                env=child_env(workdir),
                cwd=workdir,
                transport_kwargs={"stderr": subprocess.DEVNULL, "shutdown_timeout": 5.0},
            )
        )
        await self._ready(conn, workdir)

    async def start_ws(self, url: str, secret: str, workdir: str) -> None:
        transport = await create_websocket_stream(
            url, headers={"Authorization": f"Bearer {secret}"}
        )
        self.transport = transport
        conn = ClientSideConnection(self, transport)  # type: ignore[arg-type]  # duck-typed
        await self._ready(conn, workdir)

    async def _ready(self, conn: ClientSideConnection, workdir: str) -> None:
        await conn.initialize(
            protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities()
        )
        self.conn = conn
        self.session_id = (await conn.new_session(cwd=workdir, mcp_servers=[])).session_id

    async def turn(self, chunks: int) -> None:
        before = len(self.stamps)
        await self.conn.prompt(session_id=self.session_id, prompt=[text_block(f"#chunks={chunks}")])
        if len(self.stamps) - before != chunks:
            raise RuntimeError(f"expected {chunks} chunks, got {len(self.stamps) - before}")


class WsSide:
    """A WebSocket client of serve --listen, checking positions as it goes."""

    def __init__(self, url: str, secret: str) -> None:
        self.url = url
        self.secret = secret
        self.latencies_ms: list[float] = []
        self.chunks = 0
        self.last_position = 0
        self.out_of_order = 0
        self._ids = 0
        self._waiting: dict[int, asyncio.Future[Any]] = {}

    async def connect(self) -> None:
        headers = {"Authorization": f"Bearer {self.secret}"}
        self.ws = await websockets.connect(self.url, additional_headers=headers, max_size=None)
        self._reader = asyncio.create_task(self._read())
        await self.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})

    async def _read(self) -> None:
        async for frame in self.ws:
            received = time.time_ns()
            message = json.loads(frame)
            if "method" not in message:
                self._waiting.pop(message["id"]).set_result(message)
                continue
            params = message.get("params", {})
            update = params.get("update", {})
            found = STAMP.match(update.get("content", {}).get("text", ""))
            if not found:
                continue
            position = params["_meta"]["acpctl"]["position"]
            if position <= self.last_position:
                self.out_of_order += 1
            self.last_position = position
            self.chunks += 1
            self.latencies_ms.append((received - int(found.group(1))) / 1e6)

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        self._ids += 1
        waiter = asyncio.get_running_loop().create_future()
        self._waiting[self._ids] = waiter
        await self.ws.send(
            json.dumps({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params})
        )
        answer = await waiter
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    async def new_session(self, cwd: str) -> str:
        self.session_id = (await self.request("session/new", {"cwd": cwd, "mcpServers": []}))[
            "sessionId"
        ]
        return str(self.session_id)

    async def load(self, session_id: str, cwd: str) -> None:
        self.session_id = session_id
        answer = await self.request(
            "session/load", {"sessionId": session_id, "cwd": cwd, "mcpServers": []}
        )
        self.last_position = answer["_meta"]["acpctl"]["position"]

    async def turn(self, chunks: int) -> None:
        before = self.chunks
        prompt = [{"type": "text", "text": f"#chunks={chunks}"}]
        await self.request("session/prompt", {"sessionId": self.session_id, "prompt": prompt})
        if self.chunks - before != chunks:
            raise RuntimeError(f"expected {chunks} chunks, got {self.chunks - before}")

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()


class ListenServer:
    def __init__(self, workdir: str, *extra: str) -> None:
        self.workdir = workdir
        db = os.path.join(workdir, "cp.db")
        store = Store.open(db)
        try:
            self.secret = create_token(store, "bench")[1]
        finally:
            store.close()
        argv = [sys.executable, "-m", "control_plane.cli", "--db", db, "serve"]
        argv += ["--listen", "127.0.0.1:0", "--agent", STAMP_AGENT, *extra]
        self.log = open(os.path.join(workdir, "listen.stderr.log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            env=child_env(workdir),
            cwd=workdir,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = Path(workdir, "listen.stderr.log").read_text(errors="replace")
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)/acp", text)
            if found:
                self.url = f"ws://127.0.0.1:{found.group(1)}/acp"
                return
            time.sleep(0.05)
        raise RuntimeError("serve --listen did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


# -- (a) per turn ----------------------------------------------------------------------------


async def per_turn(args: argparse.Namespace, root: str) -> dict[str, Any]:
    workdirs = {name: os.path.join(root, name) for name in ("stdio", "ws", "direct")}
    for path in workdirs.values():
        os.makedirs(path)
    server = ListenServer(workdirs["ws"])
    try:
        async with AsyncExitStack() as stack:
            stdio = SdkSide()
            serve_argv = [sys.executable, "-m", "control_plane.cli", "--db"]
            serve_argv += [
                os.path.join(workdirs["stdio"], "cp.db"),
                "serve",
                "--agent",
                STAMP_AGENT,
            ]
            await stdio.start(stack, serve_argv, workdirs["stdio"])
            direct = SdkSide()
            await direct.start(stack, STAMP_AGENT.split(), workdirs["direct"])
            ws = SdkSide()
            await ws.start_ws(server.url, server.secret, workdirs["ws"])
            sides: dict[str, Any] = {"ws": ws, "stdio": stdio, "direct": direct}
            for _ in range(args.warmup):
                for side in sides.values():
                    await side.turn(args.chunks)
            for side in sides.values():
                side.latencies_ms.clear()
            times: dict[str, list[float]] = {name: [] for name in sides}
            for round_ in range(args.turns):
                order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
                for name in order:
                    started = time.perf_counter()
                    await sides[name].turn(args.chunks)
                    times[name].append((time.perf_counter() - started) * 1000)
            await ws.transport.close()
    finally:
        server.stop()
    labels = {
        "ws": "serve --listen (WebSocket)",
        "stdio": "serve (stdio)",
        "direct": "agent direct (stdio)",
    }
    table = turn_sides(times, labels, "stdio")
    for name, side in sides.items():
        table[name]["latency_p50_ms"] = percentile(side.latencies_ms, 0.50)
        table[name]["latency_p99_ms"] = percentile(side.latencies_ms, 0.99)
    return table


# -- (b) and (c) -----------------------------------------------------------------------------


async def many_connections(args: argparse.Namespace, root: str) -> dict[str, Any]:
    workdir = os.path.join(root, "many")
    os.makedirs(workdir)
    server = ListenServer(workdir)
    try:
        per_session = max(1, args.connections // args.sessions)
        prompters: list[WsSide] = []
        everyone: list[WsSide] = []
        for _ in range(args.sessions):
            prompter = WsSide(server.url, server.secret)
            await prompter.connect()
            session_id = await prompter.new_session(workdir)
            prompters.append(prompter)
            everyone.append(prompter)
            watchers = [WsSide(server.url, server.secret) for _ in range(per_session - 1)]
            await asyncio.gather(*(w.connect() for w in watchers))
            await asyncio.gather(*(w.load(session_id, workdir) for w in watchers))
            everyone += watchers
        progress(f"{len(everyone)} connections on {args.sessions} sessions")
        started = time.perf_counter()
        for _ in range(args.rounds):
            await asyncio.gather(*(p.turn(args.chunks) for p in prompters))
        # The watchers' last updates may still be on the wire when the prompters' answers land.
        expected = args.rounds * args.chunks
        deadline = time.monotonic() + 60
        while any(c.chunks < expected for c in everyone) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        wall_s = time.perf_counter() - started
        latencies = [ms for c in everyone for ms in c.latencies_ms]
        result = {
            "connections": len(everyone),
            "sessions": args.sessions,
            "updates_expected": expected * len(everyone),
            "updates_delivered": sum(c.chunks for c in everyone),
            "out_of_order_or_repeated": sum(c.out_of_order for c in everyone),
            "wall_s": wall_s,
            "latency_p50_ms": percentile(latencies, 0.50),
            "latency_p99_ms": percentile(latencies, 0.99),
        }
        await asyncio.gather(*(c.close() for c in everyone))
    finally:
        server.stop()
    return result


async def idle_memory(args: argparse.Namespace, root: str) -> dict[str, Any]:
    workdir = os.path.join(root, "idle")
    os.makedirs(workdir)
    server = ListenServer(workdir)
    try:
        await asyncio.sleep(1)
        before = rss_mb(server.proc.pid)
        clients = [WsSide(server.url, server.secret) for _ in range(args.connections)]
        for chunk in range(0, len(clients), 50):
            await asyncio.gather(*(c.connect() for c in clients[chunk : chunk + 50]))
        await asyncio.sleep(1)
        after = rss_mb(server.proc.pid)
        await asyncio.gather(*(c.close() for c in clients))
    finally:
        server.stop()
    return {
        "connections": args.connections,
        "rss_before_mb": before,
        "rss_after_mb": after,
        "kib_per_idle_connection": (after - before) * 1024 / args.connections,
    }


async def watched(args: argparse.Namespace, root: str) -> dict[str, Any]:
    """(d) One busy session, its turns timed with nobody else watching and with a watcher:
    a WebSocket client following the session (what the console does), and the console itself
    in a headless Chromium when Playwright and a Chromium are installed. Alternating blocks of
    turns (ABAB...), medians per side."""
    workdir = os.path.join(root, "watched")
    os.makedirs(workdir)
    server = ListenServer(workdir)
    result: dict[str, Any] = {}
    try:
        prompter = SdkSide()
        await prompter.start_ws(server.url, server.secret, workdir)
        for _ in range(args.warmup):
            await prompter.turn(args.chunks)
        times: dict[str, list[float]] = {"alone": [], "ws watcher": []}
        watcher: subprocess.Popen[bytes] | None = None
        block = 5
        for round_ in range(max(1, args.turns // block)):
            for name in ("alone", "ws watcher") if round_ % 2 == 0 else ("ws watcher", "alone"):
                if name == "alone" and watcher is not None:
                    watcher.terminate()
                    watcher.wait(10)
                    watcher = None
                elif name == "ws watcher":
                    watcher = _watcher_process(server, prompter.session_id, workdir)
                for _ in range(block):
                    started = time.perf_counter()
                    await prompter.turn(args.chunks)
                    times[name].append((time.perf_counter() - started) * 1000)
        if watcher is not None:
            watcher.terminate()
            watcher.wait(10)
        console = await _console_watching(args, server, prompter, workdir)
        if console is not None:
            times.update(console)
        base = median(times["alone"])
        result = {
            name: {
                "median_ms": median(values),
                "ratio": median(values) / base,
                "turns": len(values),
            }
            for name, values in times.items()
        }
        await prompter.transport.close()
    finally:
        server.stop()
    return result


WATCHER = """
import asyncio, json, sys, websockets
async def main(url, secret, sid, cwd):
    headers = {"Authorization": "Bearer " + secret}
    async with websockets.connect(url, additional_headers=headers) as ws:
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                  "params": {"protocolVersion": 1}}))
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/load",
                                  "params": {"sessionId": sid, "cwd": cwd, "mcpServers": []}}))
        async for frame in ws:
            message = json.loads(frame)
            if message.get("id") == 2:
                print("loaded", flush=True)
asyncio.run(main(*sys.argv[1:]))
"""


def _watcher_process(server: ListenServer, session_id: str, cwd: str) -> subprocess.Popen[bytes]:
    """A WebSocket client following the session, in a process of its own (in this one it
    would take the prompter's loop time and be counted as the server's)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WATCHER, server.url, server.secret, session_id, cwd],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != b"loaded":
        raise RuntimeError("the watcher did not load the session")
    return proc


async def _console_watching(
    args: argparse.Namespace, server: ListenServer, prompter: SdkSide, workdir: str
) -> dict[str, list[float]] | None:
    """The console in a headless Chromium on the busy session, against the same turns with
    the page on about:blank; None without Playwright or a Chromium."""
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        return None
    if chromium is None:
        return None
    base = server.url.replace("ws://", "http://").removesuffix("/acp")
    times: dict[str, list[float]] = {"console closed": [], "console watching": []}
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = await browser.new_page()
        await page.goto(base + "/")
        await page.fill("#token", server.secret)
        await page.click("button[type=submit]")
        await page.wait_for_selector("h1:text('Sessions')")
        block = 5
        for round_ in range(max(1, args.turns // block)):
            order = ("console closed", "console watching")
            for name in order if round_ % 2 == 0 else tuple(reversed(order)):
                if name == "console closed":
                    await page.goto("about:blank")
                else:
                    await page.goto(base + f"/#/s/{prompter.session_id}")
                    await page.wait_for_selector("#stream-status:text('live')")
                for _ in range(block):
                    started = time.perf_counter()
                    await prompter.turn(args.chunks)
                    times[name].append((time.perf_counter() - started) * 1000)
        await browser.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_turn_arguments(parser, turns=30, warmup=3, chunks=100)
    parser.add_argument("--connections", type=positive_int, default=200)
    parser.add_argument("--sessions", type=positive_int, default=20)
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument(
        "--parts", default="abcd", help="which measures to run (default abcd: all of them)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="remote-bench-") as root:
        turns, many, idle, watch = {}, {}, {}, {}
        if "a" in args.parts:
            progress("(a) per turn: WebSocket vs stdio serve")
            turns = asyncio.run(per_turn(args, root))
        if "b" in args.parts:
            progress("(b) many connections")
            many = asyncio.run(many_connections(args, root))
        if "c" in args.parts:
            progress("(c) idle connections")
            idle = asyncio.run(idle_memory(args, root))
        if "d" in args.parts:
            progress("(d) a busy session watched and not")
            watch = asyncio.run(watched(args, root))
    report = {
        "machine": machine_info(),
        "per_turn": turns,
        "many": many,
        "idle": idle,
        "watched": watch,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    if turns:
        print(f"(a) one #chunks={args.chunks} turn, {args.turns} rounds, interleaved")
        print_turn_table(turns, "stdio")
        print()
        print(f"{'added latency per update':<30}{'p50 ms':>10}{'p99 ms':>10}")
    for entry in turns.values():
        print(
            f"{entry['label']:<30}{entry['latency_p50_ms']:>10.2f}{entry['latency_p99_ms']:>10.2f}"
        )
    if many:
        print()
        print(
            f"(b) {many['connections']} connections on {many['sessions']} sessions, {args.rounds} "
            f"rounds of #chunks={args.chunks}: {many['updates_delivered']} of "
            f"{many['updates_expected']} updates delivered, {many['out_of_order_or_repeated']} out "
            f"of order or repeated, {many['wall_s']:.1f} s; added latency p50 "
            f"{many['latency_p50_ms']:.1f} ms, p99 {many['latency_p99_ms']:.1f} ms"
        )
    if idle:
        print(
            f"(c) {idle['connections']} idle connections: "
            f"{idle['kib_per_idle_connection']:.0f} KiB "
            f"each (server RSS {idle['rss_before_mb']:.0f} -> {idle['rss_after_mb']:.0f} MB)"
        )
    if watch:
        print("(d) one busy session's turns (median ms, ratio to nobody watching):")
    for name, entry in watch.items():
        ms, ratio, turns_n = entry["median_ms"], entry["ratio"], entry["turns"]
        print(f"    {name:<18}{ms:>8.2f} ms {ratio:>7.3f}x  ({turns_n} turns)")


if __name__ == "__main__":
    main()
