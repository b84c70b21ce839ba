"""A subagent's spawn through the tools: what the control plane's HTTP MCP endpoint adds to
``ControlPlane.spawn`` itself.

Two sides in one process, interleaved (the order alternates): ``spawn(agent, cwd, task,
parent=P)`` called directly, and the ``spawn_subagent`` tool called over the control plane's
own HTTP endpoint by a client on a kept-alive connection (one JSON-RPC ``tools/call`` POST,
as an agent sends it; stateless MCP needs no session). The tool's time is the client's
round trip, so it bounds the control plane's time for the request from above (it also
holds the client's HTTP work and the loopback). The target: at most 10 ms.

The children are the noop agent (``protocol/example_agent/noop.py``), ``mode=session``, no
prompt: the spawn is its transaction (the agent starts after it, on the actor). The tool's
client is a process of its own, made the root of the parent's agent tree, so the endpoint
takes it for the parent's agent (``control_plane/subagents/peers.py``) and checks it as it
would a real agent's small tree.

    python bench/subagent_spawn.py [--spawns 100] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:
    sys.path.insert(0, _REPO_ROOT)

from bench._common import machine_info, median, percentile, positive_int, progress  # noqa: E402

MAX_TOOL_MS = 10.0

# The tool's client: one ``tools/call`` POST per line read (the line is the call's id) on a
# kept-alive connection; prints the round trip in ms.
CLIENT = """
import http.client, json, sys, time
from urllib.parse import urlsplit

url = urlsplit(sys.argv[1])
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def post(message):
    conn.request("POST", url.path, body=json.dumps(message), headers=headers)
    response = conn.getresponse()
    body = response.read()
    session = response.getheader("mcp-session-id")
    if session:  # a stateful server names the MCP session: every later request carries it
        headers["mcp-session-id"] = session
    return json.loads(body) if body else None


post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "bench", "version": "0"}}})
post({"jsonrpc": "2.0", "method": "notifications/initialized"})
for line in sys.stdin:
    n = int(line)
    call = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
        "name": "spawn_subagent", "arguments": {"task": f"t{n}", "mode": "session"}}}
    began = time.perf_counter()
    answer = post(call)
    ms = (time.perf_counter() - began) * 1000.0
    ok = "error" not in answer and not answer.get("result", {}).get("isError")
    print(json.dumps({"ok": ok, "ms": ms, "answer": None if ok else answer}), flush=True)
"""
DEFAULT_SPAWNS = 100


def measure(spawns: int, workdir: Path) -> dict[str, Any]:
    from actors.settings import RuntimeSettings
    from control_plane import ControlPlane
    from protocol.agent.proc_tree import process_start_time
    from protocol.example_agent import noop
    from store import AgentSpec, SubagentLimits

    agent = AgentSpec("noop-agent", noop.command())
    settings = replace(
        RuntimeSettings(),
        subagent_limits=SubagentLimits(max_depth=2, max_children=4 * spawns),
        log_dir=str(workdir / "logs"),
    )
    times: dict[str, list[float]] = {"spawn()": [], "spawn_subagent tool": []}
    with ControlPlane.open(workdir / "cp.db", settings=settings) as cp:
        bridge = cp._bridge
        assert bridge is not None and bridge.http is not None
        parent = cp.spawn(agent, str(workdir)).session.id
        bridge.http.warm()
        # The tool's client: a process of its own, made the parent agent's tree (a real
        # agent's tree is its own processes; this one's, every child's agent too).
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT, bridge.http.url_for(parent)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert client.stdin is not None and client.stdout is not None
        client_start = process_start_time(client.pid)
        assert client_start is not None
        bridge.trees.bind(parent, client.pid, client_start)

        def tool(n: int) -> float:
            assert client.stdin is not None and client.stdout is not None
            client.stdin.write(f"{n}\n")
            client.stdin.flush()
            answer = json.loads(client.stdout.readline())
            if not answer["ok"]:
                raise RuntimeError(f"the tool failed: {answer}")
            return float(answer["ms"])

        def direct(n: int) -> float:
            began = time.perf_counter()
            cp.spawn(agent, str(workdir), parent=parent, mode="session", announce=False)
            return (time.perf_counter() - began) * 1000.0

        try:
            sides = [("spawn()", direct), ("spawn_subagent tool", tool)]
            for n in range(5):  # warm-up: the endpoint's imports, the first connection
                tool(-n - 1)
                direct(-n - 1)
            progress(f"{spawns} spawns per side, interleaved")
            for n in range(spawns):
                for name, fn in sides if n % 2 == 0 else sides[::-1]:
                    times[name].append(fn(n))
        finally:
            client.stdin.close()
            client.wait(30)
    tool_ms, direct_ms = median(times["spawn_subagent tool"]), median(times["spawn()"])
    return {
        "spawns": spawns,
        "sides": {
            name: {"median_ms": median(v), "p99_ms": percentile(v, 0.99), "times_ms": v}
            for name, v in times.items()
        },
        "tool_added_ms": tool_ms - direct_ms,
        "target": {"max_tool_ms": MAX_TOOL_MS, "tool_ms": tool_ms, "met": tool_ms <= MAX_TOOL_MS},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spawns", type=positive_int, default=DEFAULT_SPAWNS)
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="acp-spawn-bench-"))
    try:
        report = measure(args.spawns, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report["machine"] = machine_info()
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0
    for name, side in report["sides"].items():
        print(f"{name:<22} median {side['median_ms']:6.2f} ms, p99 {side['p99_ms']:6.2f} ms")
    target = report["target"]
    verdict = "MET" if target["met"] else "NOT MET"
    print(
        f"the tool adds {report['tool_added_ms']:.2f} ms to spawn(); target: the tool's whole "
        f"round trip <= {MAX_TOOL_MS:.0f} ms: {verdict} ({target['tool_ms']:.2f} ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
