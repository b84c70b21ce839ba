"""The control plane's threads named for the operating system too.

Python 3.11 gives its threads no OS name, so ``top -H``, ``ps -L`` and ``/proc`` show every
thread of ``acpctl`` as ``python``, and an operator cannot tell the store's writer from the
protocol loop. Each long-lived thread calls :func:`name_this_thread` first thing, which
copies its Python name into ``/proc/self/task/<tid>/comm`` (Linux keeps 15 bytes of it).
Elsewhere, or when ``/proc`` is not writable, nothing happens: the name is only a label.
"""

from __future__ import annotations

import sys
import threading

COMM_MAX_BYTES = 15  # Linux's TASK_COMM_LEN, less the terminating NUL


def name_this_thread() -> None:
    """Give the calling thread's Python name to the operating system (Linux only)."""
    if sys.platform != "linux":
        return
    name = threading.current_thread().name.encode("utf-8", errors="replace")
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "wb") as comm:
            comm.write(name[:COMM_MAX_BYTES])
    except OSError:  # a read-only /proc (some sandboxes): the thread stays "python"
        pass
