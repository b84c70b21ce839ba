"""Count the thread hand-offs of a process: run ``acpctl`` with every in-process hand-off
counted where it happens, and read the counts from its ``--metrics`` endpoint.

Used by ``bench/serve_overhead.py`` (``python -m bench.handoffs serve ...`` in place of
``python -m control_plane.cli serve ...``). A hand-off is one thread giving work or a result
to another. In CPython every such hand-off goes through one of four primitives, and each is
counted here, labelled with the primitive and the name of the thread that posted it (digits
folded, so that ``ThreadPoolExecutor-0_3`` and ``ThreadPoolExecutor-0_1`` add up):

- ``call_soon_threadsafe`` from a thread other than the loop's own (this is also how
  ``run_coroutine_threadsafe``, ``wrap_future`` and ``to_thread`` hand their results back);
- ``SimpleQueue.put`` (the store writer's queue, and every ``ThreadPoolExecutor``'s work
  queue, so ``run_in_executor`` and ``to_thread``);
- ``Condition.notify`` when a thread is waiting on it (``queue.Queue``, the pykka actors'
  inboxes, ``Event.set`` and ``concurrent.futures.Future`` results waited for with
  ``result()``); a notify nobody waits for wakes nobody and is not counted;
- nothing else: ``threading.Lock`` release is mutual exclusion, not a hand-off.

The counting wrappers cost about a microsecond per hand-off, so the timed side of the bench
runs serve without them; this is only for the count.

The same endpoint gives each thread's CPU (``acpctl_bench_thread_cpu_seconds_total``, read
at every scrape from Linux's ``/proc/self/task/<id>/schedstat``, in nanoseconds, and the
kernel's share from ``stat``, in clock ticks), labelled with the Python thread's name (digits
folded): where the process's CPU per turn goes, thread by thread.
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
import sys
import threading
from typing import Any

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

HANDOFFS = Counter(
    "acpctl_bench_thread_handoffs_total",
    "In-process thread hand-offs (bench/handoffs.py), by primitive and posting thread.",
    ["primitive", "thread"],
)


def _what(item: Any) -> str:
    """What is handed over: a callback's name, an executor work item's function, a type."""
    fn = getattr(item, "fn", None) or getattr(item, "_fn", None) or item  # a work item's
    fn = getattr(fn, "func", fn)  # functools.partial
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return str(name)


_DIGITS = re.compile(r"\d+")


def _poster() -> str:
    return _DIGITS.sub("N", threading.current_thread().name)


class _CountingSimpleQueue(queue.SimpleQueue):  # type: ignore[type-arg]
    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        HANDOFFS.labels(f"SimpleQueue.put {_what(item)}", _poster()).inc()
        super().put(item, block, timeout)

    def put_nowait(self, item: Any) -> None:
        self.put(item, False)


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def _thread_cpu(native_id: int) -> tuple[float, float] | None:
    """(CPU seconds on the thread, of which in the kernel) from /proc; None where there is
    no /proc (not Linux) or the thread is gone."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as fh:
            on_cpu = int(fh.read().split()[0]) / 1e9
        with open(f"/proc/self/task/{native_id}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return on_cpu, int(fields[12]) * _TICK_S  # fields 14 and 15 of stat(5): utime, stime


class _ThreadCpu(Collector):
    """Every live thread's CPU so far, summed by its name with digits folded."""

    def collect(self) -> Any:
        family = CounterMetricFamily(
            "acpctl_bench_thread_cpu_seconds",
            "CPU seconds of the process's threads by name (bench/handoffs.py); mode all or system.",
            labels=["thread", "mode"],
        )
        totals: dict[str, list[float]] = {}
        for thread in threading.enumerate():
            cpu = None if thread.native_id is None else _thread_cpu(thread.native_id)
            if cpu is not None:
                total = totals.setdefault(_DIGITS.sub("N", thread.name), [0.0, 0.0])
                total[0] += cpu[0]
                total[1] += cpu[1]
        for name, (on_cpu, system) in sorted(totals.items()):
            family.add_metric([name, "all"], on_cpu)
            family.add_metric([name, "system"], system)
        yield family


def parse_cpu(metrics_text: str) -> dict[tuple[str, str], float]:
    """``{(thread, mode): CPU seconds}`` out of a Prometheus text exposition."""
    seconds: dict[tuple[str, str], float] = {}
    pattern = re.compile(r"^acpctl_bench_thread_cpu_seconds_total\{([^}]*)\} (\S+)$")
    for line in metrics_text.splitlines():
        if match := pattern.match(line):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match[1]))  # in any order
            seconds[(labels["thread"], labels["mode"])] = float(match[2])
    return seconds


def install() -> None:
    """Count from now on (call before the code under test creates its queues and loops)."""
    queue.SimpleQueue = _CountingSimpleQueue  # type: ignore[misc]
    base = asyncio.base_events.BaseEventLoop
    call_soon_threadsafe = base.call_soon_threadsafe

    def counted_call_soon_threadsafe(self: Any, callback: Any, *args: Any, **kw: Any) -> Any:
        if getattr(self, "_thread_id", None) != threading.get_ident():
            HANDOFFS.labels(f"call_soon_threadsafe {_what(callback)}", _poster()).inc()
        return call_soon_threadsafe(self, callback, *args, **kw)

    base.call_soon_threadsafe = counted_call_soon_threadsafe  # type: ignore[method-assign,assignment]
    notify = threading.Condition.notify

    def counted_notify(self: Any, n: int = 1) -> None:
        if self._waiters:
            HANDOFFS.labels("Condition.notify", _poster()).inc()
        notify(self, n)

    threading.Condition.notify = counted_notify  # type: ignore[method-assign]
    REGISTRY.register(_ThreadCpu())


def parse(metrics_text: str) -> dict[tuple[str, str], float]:
    """``{(primitive, thread): count}`` out of a Prometheus text exposition."""
    counts: dict[tuple[str, str], float] = {}
    pattern = re.compile(
        r'^acpctl_bench_thread_handoffs_total\{primitive="([^"]*)",thread="([^"]*)"\} (\S+)$'
    )
    for line in metrics_text.splitlines():
        if match := pattern.match(line):
            counts[(match[1], match[2])] = float(match[3])
    return counts


def main() -> None:
    install()
    sys.argv[0] = "acpctl"
    from control_plane.cli import main as acpctl

    acpctl()


if __name__ == "__main__":
    main()
