"""What a webhook costs a turn (actors/delivery/notifier.py): the turn path only looks at
the kinds a commit appended and wakes the hook's thread; the POSTs run on that thread.

Two control planes in one process, each on its own SQLite store, the same agent (the noop
agent: a turn is the control plane's own work, nothing else): ``hooked`` has a ``[[notify]]``
hook for every event type pointed at a real HTTP receiver on 127.0.0.1 (``accepting``: it
answers 200 at once; with ``--slow-receiver``: 5 s a request, so deliveries pile up behind
the turns), ``plain`` has none. Turns alternate between them, round by round (who goes first
alternates too). Prints each side's median and p90 turn and the ratio.

    python bench/notify_overhead.py [--turns 60] [--slow-receiver] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:
    sys.path.insert(0, _REPO_ROOT)

from bench._common import machine_info, median, percentile, positive_int  # noqa: E402
from control_plane import ControlPlane  # noqa: E402
from tests.support.cp_harness import FAST, noop_agent  # noqa: E402
from tests.support.notify_hooks import fast, hook_to  # noqa: E402
from tests.support.webhook_receiver import Reply, receiving  # noqa: E402


def _open(work: Path, name: str, **overrides: Any) -> ControlPlane:
    settings = replace(FAST, log_dir=str(work / f"{name}-logs"), **overrides)
    return ControlPlane.open(work / f"{name}.db", settings=settings)


def run(args: argparse.Namespace) -> dict[str, Any]:
    times: dict[str, list[float]] = {"hooked": [], "plain": []}
    with tempfile.TemporaryDirectory(prefix="acpctl-notify-") as tmp, receiving() as receiver:
        work = Path(tmp)
        if args.slow_receiver:
            receiver.script = lambda _r, _n: Reply(200, delay_s=5.0)
        sides = {
            "hooked": _open(work, "hooked", **fast(hook_to(receiver.url))),
            "plain": _open(work, "plain"),
        }
        try:
            sessions = {}
            for name, cp in sides.items():
                spawned = cp.spawn(noop_agent(), work, "warm up")
                assert spawned.command is not None
                cp.wait(spawned.command.id, 60)
                sessions[name] = spawned.session.id
            for i in range(args.turns):
                order = ["hooked", "plain"] if i % 2 == 0 else ["plain", "hooked"]
                for name in order:
                    cp = sides[name]
                    started = time.perf_counter()
                    command = cp.prompt(sessions[name], f"turn {i}")
                    cp.wait(command.id, 60)
                    times[name].append((time.perf_counter() - started) * 1000)
            delivered = len(receiver.requests)
        finally:
            for cp in sides.values():
                cp.close()
    p50 = {k: median(v) for k, v in times.items()}
    return {
        "turns": args.turns,
        "slow_receiver": args.slow_receiver,
        "p50_ms": p50,
        "p90_ms": {k: percentile(v, 0.9) for k, v in times.items()},
        "ratio_p50": p50["hooked"] / p50["plain"],
        "delivered_during_run": delivered,
        "machine": machine_info(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=positive_int, default=60)
    parser.add_argument("--slow-receiver", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name in ("plain", "hooked"):
        print(
            f"{name:<7} p50 {result['p50_ms'][name]:7.2f} ms  p90 {result['p90_ms'][name]:7.2f} ms"
        )
    print(
        f"hooked / plain p50: x{result['ratio_p50']:.2f} "
        f"({result['delivered_during_run']} notifications received during the run)"
    )


if __name__ == "__main__":
    main()
