"""A real agent's turn through ``acpctl serve`` against the same agent driven directly.

What is measured
----------------
``bench/serve_overhead.py`` times a 100-update turn of the bundled example agent, about 6 ms
long: a turn made to show serve's cost per update. This asks what a user of a real agent
sees. For each of Claude Code, Codex and Gemini CLI (``tests/real_agents``: the pinned npm
packages, against the stand-in model server on 127.0.0.1, which streams its reply in several
chunks), two sides, each its own agent process and its own home directory:

* *serve*: the SDK's client -> ``acpctl serve --agent NAME`` (its own store file,
  ``synchronous=FULL``; the agent configured by name with its environment, as a user would)
  -> the agent;
* *direct*: the SDK's client -> the agent.

Each side gets a session and ``--warmup`` untimed turns, then ``--turns`` timed turns,
interleaved (the order alternates every round), each ``SAY <text>``: the model streams the
text back and the turn ends. A turn counts only if it ended with ``end_turn`` after at least
one ``agent_message_chunk``. The report gives, per agent, the medians, the ratio of medians,
the median of the paired ratios and the median time serve added per turn.

Run from the repository root (needs Node and ``npm ci --prefix tests/real_agents``)::

    python bench/real_agent_turns.py                      # all three, 20 turns each
    python bench/real_agent_turns.py --agents claude --turns 40
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:  # ahead of bench/ itself, whose actors.py is not the package
    sys.path.insert(0, _REPO_ROOT)

from acp import text_block  # noqa: E402

from bench._common import (  # noqa: E402
    machine_info,
    median,
    now,
    positive_int,
    progress,
)
from bench.serve_ready import serve_by_name  # noqa: E402
from bench.serve_sides import Side, start_side  # noqa: E402
from tests.real_agents import agents  # noqa: E402
from tests.real_agents.model_server import ModelServer  # noqa: E402

AGENTS = ("claude", "codex", "gemini")
# What serve may add to a real agent's turn (median of the per-round differences).
MAX_ADDED_MS = 2.5
DEFAULT_TURNS = 20
DEFAULT_WARMUP = 2
TURN_TIMEOUT_S = 120.0
START_TIMEOUT_S = 180.0
TEXT = "SAY The quick brown fox jumps over the lazy dog, again and again, in the bench."


def serve_command(workdir: Path, name: str, base_url: str) -> tuple[list[str], dict[str, str]]:
    """``acpctl serve --agent NAME`` on a store of its own, the agent (a home of its own)
    configured by name."""
    agent = agents.launch(name, base_url, workdir / f"home-serve-{name}")
    return serve_by_name(str(workdir), name, agent.argv, dict(agent.env), f"serve-{name}")


async def timed_turn(side: Side) -> float:
    """One ``SAY`` turn; ms. Raises unless it ended with ``end_turn`` after a chunk."""
    side.client.chunks = 0
    start = now()
    response = await asyncio.wait_for(
        side.conn.prompt(session_id=side.session_id, prompt=[text_block(TEXT)]), TURN_TIMEOUT_S
    )
    elapsed = (now() - start) * 1000.0
    if response.stop_reason != "end_turn" or side.client.chunks == 0:
        raise RuntimeError(
            f"{side.name}: turn ended with {response.stop_reason!r} after "
            f"{side.client.chunks} chunks"
        )
    return elapsed


async def measure_agent(workdir: Path, name: str, turns: int, warmup: int) -> dict[str, Any]:
    async with AsyncExitStack() as stack:
        server = stack.enter_context(ModelServer())
        serve_argv, serve_env = serve_command(workdir, name, server.base_url)
        direct = agents.launch(name, server.base_url, workdir / f"home-direct-{name}")
        progress(f"{name}: starting acpctl serve and the agent directly")
        sides = [
            await asyncio.wait_for(
                start_side(stack, "serve", serve_argv, str(workdir), serve_env), START_TIMEOUT_S
            ),
            await asyncio.wait_for(
                start_side(stack, "direct", list(direct.argv), str(workdir), dict(direct.env)),
                START_TIMEOUT_S,
            ),
        ]
        for side in sides:
            for _ in range(warmup):
                await timed_turn(side)
        for r in range(turns):
            for side in sides if r % 2 == 0 else sides[::-1]:
                side.times_ms.append(await timed_turn(side))
        serve, direct_side = sides
        paired = [a / b for a, b in zip(serve.times_ms, direct_side.times_ms, strict=True)]
        added = [a - b for a, b in zip(serve.times_ms, direct_side.times_ms, strict=True)]
        progress(
            f"{name}: serve {median(serve.times_ms):.0f} ms, direct "
            f"{median(direct_side.times_ms):.0f} ms"
        )
        return {
            "serve_ms": serve.times_ms,
            "direct_ms": direct_side.times_ms,
            "median_serve_ms": median(serve.times_ms),
            "median_direct_ms": median(direct_side.times_ms),
            "ratio_of_medians": median(serve.times_ms) / median(direct_side.times_ms),
            "median_paired_ratio": median(paired),
            "median_added_ms": median(added),
            "target": {"max_added_ms": MAX_ADDED_MS, "met": median(added) <= MAX_ADDED_MS},
        }


def print_report(report: dict[str, Any]) -> None:
    mach = report["machine"]
    print(
        f"A real agent's turn ('SAY ...': the stand-in model streams a short reply), "
        f"{report['turns']} timed turns per side (+{report['warmup']} warm-up), interleaved\n"
        f"Python {mach['python']}, SQLite {mach['sqlite']}, {mach['cpus']} CPUs, "
        f"{mach['platform']}\n"
    )
    header = (
        f"{'agent':<10}{'serve ms':>10}{'direct ms':>11}{'ratio':>9}{'paired':>9}{'added ms':>10}"
    )
    print(header)
    print("-" * len(header))
    for name, row in report["agents"].items():
        if "skipped" in row:
            print(f"{name:<10}skipped: {row['skipped']}")
            continue
        verdict = "MET" if row["target"]["met"] else "NOT MET"
        print(
            f"{name:<10}{row['median_serve_ms']:>10.0f}{row['median_direct_ms']:>11.0f}"
            f"{row['ratio_of_medians']:>8.3f}x{row['median_paired_ratio']:>8.3f}x"
            f"{row['median_added_ms']:>10.1f}  target <= {MAX_ADDED_MS} ms: {verdict}"
        )
    print("\nratio = ratio of medians (serve / direct); paired = median of the per-round ratios;")
    print("added ms = median of serve's turn minus the direct turn of the same round")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--agents",
        default=",".join(AGENTS),
        help=f"comma-separated, of {', '.join(AGENTS)} (default all)",
    )
    parser.add_argument("--turns", type=positive_int, default=DEFAULT_TURNS)
    parser.add_argument("--warmup", type=positive_int, default=DEFAULT_WARMUP)
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [n.strip() for n in args.agents.split(",") if n.strip()]
    unknown = [n for n in names if n not in AGENTS]
    if unknown:
        print(f"--agents: unknown {', '.join(unknown)} (of {', '.join(AGENTS)})", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="acp-real-turns-"))
    results: dict[str, Any] = {}
    try:
        for name in names:
            reason = agents.skip_reason(name)
            if reason is not None:
                results[name] = {"skipped": reason}
                continue
            results[name] = asyncio.run(measure_agent(workdir, name, args.turns, args.warmup))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "machine": machine_info(),
        "turns": args.turns,
        "warmup": args.warmup,
        "agents": results,
    }
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
