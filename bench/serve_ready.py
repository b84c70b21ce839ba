"""Start to session ready (process start, ``initialize``, ``session/new`` answered), through
``acpctl serve`` against the agent directly, interleaved: part of bench/serve_overhead.py,
for the example agent or a real one against the stand-in model server."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from bench._common import acpctl_argv, child_env, example_agent_argv, median, now, progress
from bench.mcp_stand_in import McpStandIn
from bench.serve_report import DIRECT, READY_TARGET_RATIOS, SERVE
from bench.serve_sides import START_TIMEOUT_S, start_side

FLOOR = "serve imports"
FLOOR_WITH_TOOLS = "serve + MCP server imports"
WITH_MCP = "direct + MCP"
# As ``acpctl``'s ``main`` does: the SDK's models read their docstrings once per file.
_READER = "from protocol.attribute_docstrings import install_on_import; install_on_import(); "
FLOOR_ARGV = [sys.executable, "-c", _READER + "import control_plane.serve.run"]
# What serve must have loaded before an agent that waits for its MCP servers at session/new
# (Claude Code) is answered: serve itself and the subagent tools' HTTP endpoint, in one
# process (one GIL: the imports of one cannot run beside the other's).
FLOOR_WITH_TOOLS_ARGV = [
    sys.executable,
    "-c",
    _READER + "import control_plane.serve.run, mcp.server.lowlevel, "
    "mcp.server.streamable_http_manager, uvicorn",
]


async def time_to_exit(argv: list[str], workdir: str, env: dict[str, str]) -> float:
    """Seconds from spawning ``argv`` to its exit (it must succeed)."""
    start = now()
    proc = await asyncio.create_subprocess_exec(*argv, cwd=workdir, env=env)
    if await proc.wait() != 0:
        raise RuntimeError(f"{argv} failed")
    return now() - start


async def time_to_ready(
    argv: list[str],
    workdir: str,
    env: dict[str, str],
    name: str,
    mcp_servers: list[dict[str, Any]] | None = None,
) -> float:
    """Seconds from spawning ``argv`` to its ``session/new`` answered (a fresh process; for
    serve, a session whose backend agent has started: serve answers only then)."""
    async with AsyncExitStack() as stack:
        start = now()
        started = start_side(stack, name, argv, workdir, env, mcp_servers)
        await asyncio.wait_for(started, START_TIMEOUT_S)
        return now() - start


def serve_by_name(
    workdir: str, name: str, argv: Sequence[str], env: dict[str, str], tag: str
) -> tuple[list[str], dict[str, str]]:
    """``acpctl serve --agent NAME`` on a store of its own (``<tag>.db``), the agent
    configured by name in a config file (``<tag>.toml``: its command and environment, as a
    user would write them)."""
    config = Path(workdir) / f"{tag}.toml"
    env_table = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in env.items())
    config.write_text(
        f"[agents.{name}]\ncommand = {json.dumps(list(argv))}\nenv = {{ {env_table} }}\n"
    )
    serve_env = {**child_env(workdir), "ACPCTL_CONFIG": str(config)}
    serve_argv = acpctl_argv(os.path.join(workdir, f"{tag}.db"), "serve", "--agent", name)
    return serve_argv, serve_env


def real_agent_sides(
    workdir: str, name: str, base_url: str
) -> tuple[list[str], dict[str, str], list[str], dict[str, str]]:
    """A real agent (``tests/real_agents``: Claude Code, Codex or Gemini CLI against the
    stand-in model server): its argv and env directly, and acpctl serve configured with it
    by name."""
    from tests.real_agents.agents import launch

    agent = launch(name, base_url, Path(workdir) / f"home-{name}")
    serve_argv, serve_env = serve_by_name(workdir, name, agent.argv, agent.env, f"ready-{name}")
    return serve_argv, serve_env, list(agent.argv), dict(agent.env)


async def measure_ready(workdir: str, rounds: int, real_agent: str | None = None) -> dict[str, Any]:
    """Start to session ready, serve against direct, interleaved (the order alternates),
    and in each round the floor: how long serve's own imports take in a fresh process. One
    untimed serve start first (a new store: it records the agent's capabilities, asked of
    the agent started ahead)."""
    env = child_env(workdir)
    backend = shlex.join(example_agent_argv(os.path.join(workdir, "ready-agent-state.json")))
    serve_argv = acpctl_argv(os.path.join(workdir, "ready.db"), "serve", "--agent", backend)
    direct_argv = example_agent_argv(os.path.join(workdir, "ready-direct-state.json"))
    serve_env = direct_env = env
    async with AsyncExitStack() as stack:
        if real_agent is not None:
            from tests.real_agents.model_server import ModelServer

            server = stack.enter_context(ModelServer())
            serve_argv, serve_env, direct_argv, direct_env = real_agent_sides(
                workdir, real_agent, server.base_url
            )
        # The direct agent once more, offered an HTTP MCP server that is always ready: what
        # the agent's own session start costs with MCP tools to connect to, as serve's
        # agent has (the subagent tools).
        tools = stack.enter_context(McpStandIn())
        progress(f"start to session ready: {rounds} rounds per side")
        first = await time_to_ready(serve_argv, workdir, serve_env, SERVE)
        times: dict[str, list[float]] = {
            SERVE: [],
            DIRECT: [],
            WITH_MCP: [],
            FLOOR: [],
            FLOOR_WITH_TOOLS: [],
        }
        sides = [
            (SERVE, serve_argv, serve_env, None),
            (DIRECT, direct_argv, direct_env, None),
            (WITH_MCP, direct_argv, direct_env, [tools.entry()]),
        ]
        for r in range(rounds):
            shift = r % len(sides)
            for name, argv, side_env, mcp in sides[shift:] + sides[:shift]:
                times[name].append(await time_to_ready(argv, workdir, side_env, name, mcp))
            times[FLOOR].append(await time_to_exit(FLOOR_ARGV, workdir, env))
            times[FLOOR_WITH_TOOLS].append(await time_to_exit(FLOOR_WITH_TOOLS_ARGV, workdir, env))
    serve_s, direct_s = median(times[SERVE]), median(times[DIRECT])
    ratio = serve_s / direct_s
    paired = median([a / b for a, b in zip(times[SERVE], times[DIRECT], strict=True)])
    backend = real_agent or "example agent"
    limit = READY_TARGET_RATIOS[backend]
    floor_s = median(times[FLOOR])
    return {
        "rounds": rounds,
        "backend": backend,
        "first_serve_s": first,
        "serve_s": times[SERVE],
        "direct_s": times[DIRECT],
        "median_serve_s": serve_s,
        "median_direct_s": direct_s,
        "ratio_of_medians": ratio,
        "median_paired_ratio": paired,
        "target": {"max_ratio": limit, "met": ratio <= limit},
        # Serve answers nothing before its own imports are done, nor before its agent is
        # ready: the best ratio this machine allows without trimming them.
        "direct_with_mcp": {
            "what": "the agent directly, offered an always-ready HTTP MCP server",
            "times_s": times[WITH_MCP],
            "median_s": median(times[WITH_MCP]),
            "ratio": median(times[WITH_MCP]) / direct_s,
        },
        "floor": {
            "what": "python -c 'import control_plane.serve.run' (serve's imports)",
            "times_s": times[FLOOR],
            "median_s": floor_s,
            "ratio": max(floor_s, direct_s) / direct_s,
            "with_tools": {
                "what": "serve's imports and the MCP server's with uvicorn, one process",
                "times_s": times[FLOOR_WITH_TOOLS],
                "median_s": median(times[FLOOR_WITH_TOOLS]),
                "ratio": max(median(times[FLOOR_WITH_TOOLS]), direct_s) / direct_s,
            },
        },
    }
