"""The control plane's threads carry their Python names in ``/proc`` (what ``top -H`` and
``ps -L`` show), not ``python`` for all of them."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from protocol.loop import ProtocolLoop
from protocol.os_thread_name import COMM_MAX_BYTES, name_this_thread
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


def test_the_store_writer_and_the_protocol_loop_are_named(tmp_path: Path) -> None:
    store = Store.open(str(tmp_path / "cp.db"))
    loop = ProtocolLoop()
    try:
        store.write(lambda ctx: None)  # the writer thread has started and run
        loop.call(_noop(), 5.0)
        names = {_comm(int(task.name)) for task in Path("/proc/self/task").iterdir()}
    finally:
        loop.stop()
        store.close()
    assert {"store-writer", "acp-protocol-loop"[:COMM_MAX_BYTES]} <= names, names


async def _noop() -> None:
    return None
