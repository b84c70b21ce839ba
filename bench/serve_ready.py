"""Start to session ready (process start, ``initialize``, ``session/new`` answered), through
``acpctl serve`` against the agent directly, interleaved: part of bench/serve_overhead.py,
for the example agent or a real one against the stand-in model server."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from bench._common import acpctl_argv, child_env, example_agent_argv, median, now, progress
from bench.serve_report import DIRECT, READY_TARGET_RATIO, SERVE
from bench.serve_sides import START_TIMEOUT_S, start_side


async def time_to_ready(argv: list[str], workdir: str, env: dict[str, str], name: str) -> float:
    """Seconds from spawning ``argv`` to its ``session/new`` answered (a fresh process; for
    serve, a session whose backend agent has started: serve answers only then)."""
    async with AsyncExitStack() as stack:
        start = now()
        await asyncio.wait_for(start_side(stack, name, argv, workdir, env), START_TIMEOUT_S)
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
    """Start to session ready, serve against direct, interleaved (the order alternates). One
    untimed serve start first: the very first serve of an agent command starts the agent
    once to learn its capabilities (then kept in the store); every later start answers
    ``initialize`` from the store and pays one agent start, at ``session/new``."""
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
        progress(f"start to session ready: {rounds} rounds per side")
        first = await time_to_ready(serve_argv, workdir, serve_env, SERVE)
        times: dict[str, list[float]] = {SERVE: [], DIRECT: []}
        sides = [(SERVE, serve_argv, serve_env), (DIRECT, direct_argv, direct_env)]
        for r in range(rounds):
            for name, argv, side_env in sides if r % 2 == 0 else sides[::-1]:
                times[name].append(await time_to_ready(argv, workdir, side_env, name))
    serve_s, direct_s = median(times[SERVE]), median(times[DIRECT])
    ratio = serve_s / direct_s
    paired = median([a / b for a, b in zip(times[SERVE], times[DIRECT], strict=True)])
    return {
        "rounds": rounds,
        "backend": real_agent or "example agent",
        "first_serve_s": first,
        "serve_s": times[SERVE],
        "direct_s": times[DIRECT],
        "median_serve_s": serve_s,
        "median_direct_s": direct_s,
        "ratio_of_medians": ratio,
        "median_paired_ratio": paired,
        "target": {"max_ratio": READY_TARGET_RATIO, "met": ratio <= READY_TARGET_RATIO},
    }
