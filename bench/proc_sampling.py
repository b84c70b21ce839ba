"""Memory, process and CPU sampling from /proc for the benchmarks: this process's RSS and
open fds and its descendants' count and summed RSS, at their peaks (bench/actors.py); a
process's CPU seconds and its children (bench/serve_overhead.py)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

PAGE = os.sysconf("SC_PAGE_SIZE")


def proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, rss bytes) for every process visible in /proc."""
    table: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        rest = data[data.rfind(b")") + 2 :].split()
        try:
            table[int(name)] = (int(rest[1]), int(rest[21]) * PAGE)
        except (IndexError, ValueError):
            continue
    return table


def descendants(root: int, table: dict[int, tuple[int, int]]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def self_status(key: str) -> int:
    """A ``/proc/self/status`` memory field (VmRSS, VmHWM) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


@dataclass
class Peaks:
    own_rss: int = 0
    children_rss: int = 0
    total_rss: int = 0
    children: int = 0
    fds: int = 0
    samples: int = 0


class Monitor:
    """Samples this process's RSS and fds and its descendants' count and summed RSS."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.peaks = Peaks()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-monitor", daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        table = proc_table()
        kids = descendants(os.getpid(), table)
        own = self_status("VmRSS")
        kids_rss = sum(table[p][1] for p in kids if p in table)
        try:
            fds = len(os.listdir("/proc/self/fd"))
        except OSError:
            fds = 0
        p = self.peaks
        p.own_rss = max(p.own_rss, own)
        p.children_rss = max(p.children_rss, kids_rss)
        p.total_rss = max(p.total_rss, own + kids_rss)
        p.children = max(p.children, len(kids))
        p.fds = max(p.fds, fds)
        p.samples += 1


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds a live process has used (Linux ``/proc``), else None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pids(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (serve starts its agents from its loop thread)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as children:
                found += [int(c) for c in children.read().split()]
        except OSError:
            continue
    return found
