"""The control plane's threads carry their Python names in ``/proc`` (what ``top -H`` and
``ps -L`` show), not ``python`` for all of them."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from protocol.loop import ProtocolLoop
from protocol.os_thread_name import COMM_MAX_BYTES, name_this_thread, name_threads
from store import Store

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="OS thread names are read from Linux's /proc"
)


def _comm(native_id: int) -> str:
    return Path(f"/proc/self/task/{native_id}/comm").read_text().rstrip("\n")


def _named_in(name: str) -> tuple[str, str]:
    """The OS name of a thread called ``name`` before and after it names itself."""
    seen: list[str] = []

    def run() -> None:
        seen.append(_comm(threading.get_native_id()))
        name_this_thread()
        seen.append(_comm(threading.get_native_id()))

    thread = threading.Thread(target=run, name=name)
    thread.start()
    thread.join()
    return seen[0], seen[1]


def test_a_thread_gives_its_python_name_to_the_os() -> None:
    before, after = _named_in("probe-thread")
    assert before != "probe-thread"  # what Python 3.11 leaves it: the process's name
    assert after == "probe-thread"


def test_a_long_name_keeps_its_first_15_bytes() -> None:
    _, after = _named_in("a-very-long-thread-name")
    assert after == "a-very-long-thread-name"[:COMM_MAX_BYTES]


def _os_names() -> set[str]:
    return {_comm(int(task.name)) for task in Path("/proc/self/task").iterdir()}


def test_the_protocol_loop_names_itself_and_the_sweep_names_the_store_writer(
    tmp_path: Path,
) -> None:
    """The store may not import this helper (the layering), so its writer is named by
    ``name_threads``, which the supervisor's sweep runs; the protocol loop names itself."""
    store = Store.open(str(tmp_path / "cp.db"))
    loop = ProtocolLoop()
    try:
        store.write(lambda ctx: None)  # the writer thread has started and run
        loop.call(_noop(), 5.0)
        before = _os_names()
        name_threads()
        after = _os_names()
    finally:
        loop.stop()
        store.close()
    assert "acp-protocol-loop"[:COMM_MAX_BYTES] in before
    assert "store-writer" not in before
    assert "store-writer" in after, after


def test_a_control_plane_s_threads_are_named(tmp_path: Path) -> None:
    """Through the product: a running control plane's supervisor names what it finds."""
    from tests.support.cp_harness import open_cp

    with open_cp(tmp_path) as cp:
        assert cp is not None
        deadline = time.monotonic() + 10
        while "store-writer" not in _os_names() and time.monotonic() < deadline:
            time.sleep(0.1)
        names = _os_names()
    assert {"store-writer", "supervisor-sweep"[:COMM_MAX_BYTES]} <= names, names


async def _noop() -> None:
    return None
