"""The control plane's threads named for the operating system too.

Python 3.11 gives its threads no OS name, so ``top -H``, ``ps -L`` and ``/proc`` show every
thread of ``acpctl`` as ``python``, and an operator cannot tell the store's writer from the
protocol loop. A thread's Python name is copied into ``/proc/self/task/<tid>/comm`` (Linux
keeps 15 bytes of it): by the long-lived threads of this package and of ``actors`` first thing
(:func:`name_this_thread`), and for every other thread (the store's, which may not import this
package, and pool threads) by :func:`name_threads`, which the supervisor's sweep runs every
second. Elsewhere, or when ``/proc`` is not writable, nothing happens: a name is a label.
"""

from __future__ import annotations

import sys
import threading

COMM_MAX_BYTES = 15  # Linux's TASK_COMM_LEN, less the terminating NUL

_lock = threading.Lock()
_named: set[int] = set()  # native ids of live threads already named


def name_this_thread() -> None:
    """Give the calling thread's Python name to the operating system (Linux only)."""
    thread = threading.current_thread()
    if _write(threading.get_native_id(), thread.name):
        with _lock:
            _named.add(threading.get_native_id())


def name_threads() -> None:
    """Name every live thread of the process not named yet (a thread id can be reused once
    its thread ended, so only live ones are remembered)."""
    if sys.platform != "linux":
        return
    threads = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    with _lock:
        _named.intersection_update(threads)
        todo = {tid: name for tid, name in threads.items() if tid not in _named}
    for tid, name in todo.items():
        if _write(tid, name):
            with _lock:
                _named.add(tid)


def _write(native_id: int, name: str) -> bool:
    if sys.platform != "linux":
        return False
    try:
        with open(f"/proc/self/task/{native_id}/comm", "wb") as comm:
            comm.write(name.encode("utf-8", errors="replace")[:COMM_MAX_BYTES])
    except OSError:  # the thread ended meanwhile, or a read-only /proc (some sandboxes)
        return False
    return True
