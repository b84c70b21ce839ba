"""Small helpers shared by the benchmark scripts: repo path set-up, timing, medians, RSS,
machine description. Standard library only."""

from __future__ import annotations

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
