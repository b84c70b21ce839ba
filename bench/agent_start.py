"""What reading attribute docstrings once per file (protocol/attribute_docstrings.py) saves
where the project's processes start.

Two sides, interleaved, the order rotating each round: ``reader`` (as shipped) and
``pydantic`` (``ACPCTL_FAST_DOCSTRINGS=0``: pydantic's own function, once per class). For
each side, fresh processes:

- ``agent``: the bundled example agent, from spawn to ``session/new`` answered (``ready_s``,
  timed as bench/serve_ready.py times it, by the SDK's client), and the CPU (user + system)
  the process used in all, once reaped;
- ``serve_imports``: what ``acpctl serve`` imports before it answers ``initialize``
  (``python -c 'import control_plane.serve.run'`` after ``install_on_import``, as
  ``acpctl``'s ``main`` does), to exit, with its CPU.

Medians per side, the ratio of medians (reader / pydantic) and the median of the per-round
ratios. Run from the repository root::

    python bench/agent_start.py                 # 15 rounds
    python bench/agent_start.py --rounds 25 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
from collections.abc import Awaitable
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:
    sys.path.insert(0, _REPO_ROOT)

from bench._common import child_env, example_agent_argv, machine_info, median  # noqa: E402
from bench.serve_ready import time_to_exit, time_to_ready  # noqa: E402

SIDES = ("reader", "pydantic")
SERVE_IMPORTS = [
    sys.executable,
    "-c",
    "from protocol.attribute_docstrings import install_on_import\n"
    "install_on_import()\n"
    "import control_plane.serve.run\n",
]


def _side_env(base: dict[str, str], side: str) -> dict[str, str]:
    env = dict(base)
    if side == "pydantic":
        env["ACPCTL_FAST_DOCSTRINGS"] = "0"
    return env


async def _with_cpu(timed: Awaitable[float]) -> tuple[float, float]:
    """(what ``timed`` gives, the CPU, user + system, of the processes it started and
    reaped): this bench starts one process at a time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    took = await timed  # a coroutine runs only when awaited: after the first reading
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu


async def _rounds(rounds: int, workdir: str, quiet: bool) -> dict[str, dict[str, list[float]]]:
    keys = ("agent_ready_s", "agent_cpu_s", "serve_imports_s", "serve_imports_cpu_s")
    samples: dict[str, dict[str, list[float]]] = {s: {k: [] for k in keys} for s in SIDES}
    base = child_env(workdir)
    agent = example_agent_argv(os.path.join(workdir, "state.json"))
    for n in range(rounds):
        for side in SIDES if n % 2 == 0 else SIDES[::-1]:
            env = _side_env(base, side)
            # The agent's CPU counts once it is reaped: time_to_ready's stack closes it.
            ready, cpu = await _with_cpu(time_to_ready(agent, workdir, env, side))
            samples[side]["agent_ready_s"].append(ready)
            samples[side]["agent_cpu_s"].append(cpu)
            took, cpu = await _with_cpu(time_to_exit(SERVE_IMPORTS, workdir, env))
            samples[side]["serve_imports_s"].append(took)
            samples[side]["serve_imports_cpu_s"].append(cpu)
        if not quiet:
            print(f"round {n + 1}/{rounds}", file=sys.stderr)
    return samples


def _summary(samples: dict[str, dict[str, list[float]]], key: str) -> dict[str, Any]:
    reader, stock = samples["reader"][key], samples["pydantic"][key]
    paired = [r / s for r, s in zip(reader, stock, strict=True)]
    return {
        "reader": round(median(reader), 4),
        "pydantic": round(median(stock), 4),
        "ratio_of_medians": round(median(reader) / median(stock), 3),
        "median_paired_ratio": round(median(paired), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="acpctl-bench-start-") as workdir:
        samples = asyncio.run(_rounds(args.rounds, workdir, args.json))
    keys = list(samples["reader"])
    result = {
        "rounds": args.rounds,
        "machine": machine_info(),
        **{key: _summary(samples, key) for key in keys},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{'':22} {'reader':>9} {'pydantic':>9} {'ratio':>7} {'paired':>7}")
    for key in keys:
        row = result[key]
        print(
            f"{key:22} {row['reader']:9.3f} {row['pydantic']:9.3f} "
            f"{row['ratio_of_medians']:7.3f} {row['median_paired_ratio']:7.3f}"
        )


if __name__ == "__main__":
    main()
