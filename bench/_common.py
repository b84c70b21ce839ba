"""Small helpers shared by the benchmark scripts: repo path set-up, timing, medians, RSS,
machine description. Standard library only."""

from __future__ import annotations

import argparse
import math
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ensure_repo_on_path() -> None:
    """Make ``import store`` etc. work when a bench is run as ``python bench/x.py``."""
    if REPO_ROOT not in sys.path:
        sys.path.insert(0, REPO_ROOT)


def child_env(workdir: str) -> dict[str, str]:
    """The caller's environment, minus any user configuration of acpctl (an empty config
    file; no ACPCTL_* overrides), with the repository importable: for the acpctl and agent
    processes a benchmark starts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACPCTL_")}
    config = os.path.join(workdir, "empty-config.toml")
    if not os.path.exists(config):
        with open(config, "w", encoding="utf-8"):
            pass
    env["ACPCTL_CONFIG"] = config
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + path if path else "")
    return env


def example_agent_argv(state_file: str) -> list[str]:
    """The bundled example agent, keeping its state in ``state_file``."""
    return [sys.executable, "-m", "protocol.example_agent", "--state-file", state_file]


def acpctl_argv(db: str, *args: str) -> list[str]:
    """``acpctl --db DB ARGS...`` with this interpreter."""
    return [sys.executable, "-m", "control_plane.cli", "--db", db, *args]


def now() -> float:
    return time.perf_counter()


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by the nearest rank; nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))])


def spread(values: Sequence[float]) -> tuple[float, float]:
    """(min, max); (nan, nan) for no values."""
    return (min(values), max(values)) if values else (float("nan"), float("nan"))


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024.0 if sys.platform != "darwin" else peak / (1024.0 * 1024.0)


def machine_info() -> dict[str, Any]:
    import sqlite3

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        import sqlalchemy

        info["sqlalchemy"] = sqlalchemy.__version__
    except ImportError:  # pragma: no cover - a dependency of the project
        pass
    return info


def progress(message: str) -> None:
    """Progress goes to stderr so ``--json`` output on stdout stays machine-readable."""
    print(message, file=sys.stderr, flush=True)


# -- argument types shared by the scripts' command lines ------------------------------------


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_int_list(text: str) -> list[int]:
    """``"1,16,64"`` -> ``[1, 16, 64]``; every value at least 1."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text}") from exc
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"need one or more counts >= 1, got {text!r}")
    return values


# -- the two per-turn benchmarks (acp_overhead, serve_overhead) ----------------------------


def add_turn_arguments(
    parser: argparse.ArgumentParser, turns: int, warmup: int, chunks: int
) -> None:
    """``--turns``, ``--warmup``, ``--chunks`` for a benchmark of ``#chunks=N`` turns."""
    parser.add_argument(
        "--turns",
        type=positive_int,
        default=turns,
        help=f"timed turns per side (default {turns}; at least 20 for the target)",
    )
    parser.add_argument(
        "--warmup",
        type=non_negative_int,
        default=warmup,
        help=f"untimed turns per side first (default {warmup})",
    )
    parser.add_argument(
        "--chunks",
        type=non_negative_int,
        default=chunks,
        help=f"message chunks per turn (default {chunks})",
    )


def turn_sides(
    times: dict[str, list[float]], labels: dict[str, str], baseline: str
) -> dict[str, dict[str, Any]]:
    """Per side: median, min/max, ratio of medians and median paired ratio to ``baseline``."""
    base = times[baseline]
    base_median = median(base)
    sides: dict[str, dict[str, Any]] = {}
    for name, values in times.items():
        paired = [a / b for a, b in zip(values, base, strict=True)]
        sides[name] = {
            "label": labels[name],
            "median_ms": median(values),
            "min_max_ms": spread(values),
            "ratio_of_medians": median(values) / base_median,
            "median_paired_ratio": median(paired),
            "times_ms": values,
        }
    return sides


def print_turn_table(sides: dict[str, dict[str, Any]], versus: str) -> None:
    """The table of ``turn_sides`` and the line explaining its ratio columns."""
    column = f"vs {versus}"
    header = f"{'':<26}{'median ms':>11}{'min':>9}{'max':>9}{column:>11}{'paired':>9}"
    print(header)
    print("-" * len(header))
    for entry in sides.values():
        lo, hi = entry["min_max_ms"]
        print(
            f"{entry['label']:<26}{entry['median_ms']:>11.2f}{lo:>9.2f}{hi:>9.2f}"
            f"{entry['ratio_of_medians']:>10.3f}x{entry['median_paired_ratio']:>8.3f}x"
        )
    print()
    print(
        f"{column} = ratio of medians (ms per turn / {versus} client's); paired = median of "
        "the per-round ratios"
    )
