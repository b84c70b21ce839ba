"""What reading attribute docstrings once per file (protocol/attribute_docstrings.py) saves
where the project's processes start.

Two sides, interleaved, the order rotating each round: ``reader`` (as shipped) and
``pydantic`` (``ACPCTL_FAST_DOCSTRINGS=0``: pydantic's own function, once per class). For
each side, fresh processes:

- ``agent``: the bundled example agent, from spawn to ``session/new`` answered (``ready_s``),
  and the CPU (user + system) the process used in all, read from ``wait4`` after it exits on
  EOF;
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
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:
    sys.path.insert(0, _REPO_ROOT)

from bench._common import child_env, example_agent_argv, machine_info, median  # noqa: E402

SIDES = ("reader", "pydantic")
SERVE_IMPORTS = (
    "from protocol.attribute_docstrings import install_on_import\n"
    "install_on_import()\n"
    "import control_plane.serve.run\n"
)


def _side_env(base: dict[str, str], side: str) -> dict[str, str]:
    env = dict(base)
    if side == "pydantic":
        env["ACPCTL_FAST_DOCSTRINGS"] = "0"
    return env


def _cpu_s(usage: Any) -> float:
    return float(usage.ru_utime + usage.ru_stime)


def agent_ready(env: dict[str, str], workdir: str) -> tuple[float, float]:
    """(spawn to ``session/new`` answered, the process's CPU in all) of one example agent."""
    argv = example_agent_argv(os.path.join(workdir, "state.json"))
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stdout is not None

    def ask(request_id: int, method: str, params: dict[str, Any]) -> None:
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        proc.stdin.write((json.dumps(message) + "\n").encode())  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        while json.loads(proc.stdout.readline()).get("id") != request_id:  # type: ignore[union-attr]
            pass

    ask(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    ask(2, "session/new", {"cwd": workdir, "mcpServers": []})
    ready = time.perf_counter() - start
    proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    return ready, _cpu_s(usage)


def serve_imports(env: dict[str, str], workdir: str) -> tuple[float, float]:
    """(spawn to exit, CPU) of a process importing what serve needs to answer ``initialize``."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", SERVE_IMPORTS], env=env, cwd=workdir)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError("serve's imports failed")
    return time.perf_counter() - start, _cpu_s(usage)


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
    keys = ("agent_ready_s", "agent_cpu_s", "serve_imports_s", "serve_imports_cpu_s")
    samples: dict[str, dict[str, list[float]]] = {s: {k: [] for k in keys} for s in SIDES}
    with tempfile.TemporaryDirectory(prefix="acpctl-bench-start-") as workdir:
        base = child_env(workdir)
        for n in range(args.rounds):
            order = SIDES if n % 2 == 0 else SIDES[::-1]
            for side in order:
                env = _side_env(base, side)
                ready, cpu = agent_ready(env, workdir)
                samples[side]["agent_ready_s"].append(ready)
                samples[side]["agent_cpu_s"].append(cpu)
                took, cpu = serve_imports(env, workdir)
                samples[side]["serve_imports_s"].append(took)
                samples[side]["serve_imports_cpu_s"].append(cpu)
            if not args.json:
                print(f"round {n + 1}/{args.rounds}", file=sys.stderr)
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
