"""What tracing and metrics cost on a whole control-plane turn.

One ``ControlPlane`` on a real SQLite store runs two sessions of the bundled example agent.
Turns (``#permission #tool`` then ``#chunks=N``: a turn span, a permission span, a tool span,
N+few updates counted) alternate between the sessions, one at a time, and each side is
timed from ``prompt`` to the outcome being durable (``wait``):

* *on*: an OpenTelemetry SDK tracer provider with a batch processor feeding an in-memory
  exporter (the spans are really built and exported), and the Prometheus metrics counting;
* *off*: the API's no-op tracer, and every metric replaced by a no-op.

Both sides share the process, the store and the machine's noise; the order rotates each
round. The report gives medians, the ratio of medians (on / off) and the median of the
per-round ratios; the target (docs/observability.md): on within 3 % of off.

Run from the repository root::

    python bench/telemetry_overhead.py              # 40 rounds, ~1 min
    python bench/telemetry_overhead.py --rounds 80 --chunks 100 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:  # ahead of bench/ itself, whose actors.py is not the package
    sys.path.insert(0, _REPO_ROOT)

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from bench._common import machine_info, median, now, progress  # noqa: E402
from bench.acp_overhead import _metrics_off  # noqa: E402
from control_plane import ControlPlane, Decision, PermissionPolicy, RuntimeSettings  # noqa: E402
from control_plane.agents import agent_from_command  # noqa: E402
from protocol import tracing  # noqa: E402

TARGET = 1.03


@contextmanager
def _tracing(tracer: trace.Tracer) -> Iterator[None]:
    saved = tracing.TRACER
    tracing.TRACER = tracer
    try:
        yield
    finally:
        tracing.TRACER = saved


@contextmanager
def _off() -> Iterator[None]:
    with _metrics_off(), _tracing(trace.NoOpTracer()):
        yield


def measure(workdir: str, rounds: int, warmup: int, chunks: int) -> dict[str, Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    real = provider.get_tracer("acp-control-plane")
    settings = RuntimeSettings(permission_policy=PermissionPolicy(Decision.ALLOW))
    settings = replace(settings, log_dir=os.path.join(workdir, "logs"))
    agent = agent_from_command(
        [sys.executable, "-m", "protocol.example_agent", "--state-file", f"{workdir}/a.json"]
    )
    prompt = f"#permission #tool look #chunks={chunks}"
    times: dict[str, list[float]] = {"on": [], "off": []}
    with ControlPlane.open(os.path.join(workdir, "cp.db"), settings=settings) as cp:
        sides = {name: cp.spawn(agent, workdir, "warm up").session.id for name in ("on", "off")}
        contexts = {"on": lambda: _tracing(real), "off": _off}
        for r in range(warmup + rounds):
            order = ["on", "off"] if r % 2 == 0 else ["off", "on"]
            for name in order:
                with contexts[name]():
                    start = now()
                    outcome = cp.wait(cp.prompt(sides[name], prompt).id, 60)
                    elapsed = (now() - start) * 1000.0
                if not outcome.ok:
                    raise RuntimeError(f"{name}: the turn failed: {outcome}")
                if r >= warmup:
                    times[name].append(elapsed)
            if (r + 1) % 10 == 0:
                progress(
                    f"round {r + 1}: on {median(times['on']):.1f} ms, "
                    f"off {median(times['off']):.1f} ms"
                )
    provider.force_flush()
    spans = exporter.get_finished_spans()
    on, off = median(times["on"]), median(times["off"])
    paired = median([a / b for a, b in zip(times["on"], times["off"], strict=True)])
    return {
        "rounds": rounds,
        "chunks": chunks,
        "on_ms": on,
        "off_ms": off,
        "ratio_of_medians": on / off,
        "median_paired_ratio": paired,
        "spans_exported": len(spans),
        "target": TARGET,
        "met": on / off <= TARGET,
        "machine": machine_info(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="acpctl-telemetry-")
    try:
        report = measure(workdir, args.rounds, args.warmup, args.chunks)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        verdict = "MET" if report["met"] else "NOT MET"
        print(
            f"a whole turn ('#permission #tool #chunks={report['chunks']}'), "
            f"{report['rounds']} rounds, interleaved\n"
            f"tracing + metrics on: {report['on_ms']:.2f} ms, off: {report['off_ms']:.2f} ms = "
            f"{report['ratio_of_medians']:.3f}x (paired median "
            f"{report['median_paired_ratio']:.3f}x); {report['spans_exported']} spans exported; "
            f"target <= {TARGET:.2f}x: {verdict}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
