"""Small helpers shared by the benchmark scripts: repo path set-up, timing, medians, RSS,
machine description. Standard library only."""

from __future__ import annotations

import argparse
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


def now() -> float:
    return time.perf_counter()


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


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
