"""The same durable work through DBOS Transact (the optional ``bench`` extra: ``pip install
-e '.[bench]'``), for ``bench/store_throughput.py`` to run beside the store.

One command of the store is enqueue -> claim -> complete, three acknowledged durable writes.
Its DBOS counterpart is one workflow with one step, called synchronously: DBOS records the
workflow's start, the step's output and the workflow's end in its system database, a SQLite
file (WAL) in the same directory as the store's, so on the same file system. Each submitter
thread calls its workflows one after another, as each store submitter loops its commands.

DBOS is one instance per process: every run configures it on a fresh file, launches it and
destroys it (its registry of workflows is kept between runs).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from typing import Any

from bench._common import now


def available() -> bool:
    try:
        import dbos  # noqa: F401
    except ImportError:
        return False
    return True


def version() -> str:
    from importlib.metadata import version as dist_version

    return dist_version("dbos")


_registered: dict[str, Any] = {}


def _workflow() -> Any:
    """The workflow, registered once per process."""
    if "command" in _registered:
        return _registered["command"]
    from dbos import DBOS

    @DBOS.step()
    def run_step(payload: dict[str, Any]) -> dict[str, Any]:
        return {"stopReason": "end_turn", "echo": payload["n"]}

    @DBOS.workflow()
    def command(payload: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = run_step(payload)
        return result

    _registered["command"] = command
    return command


def run(workdir: str, submitters: int, commands: int) -> tuple[int, float]:
    """(workflows completed, seconds) for ``commands`` workflows over ``submitters`` threads."""
    from dbos import DBOS, DBOSConfig

    path = os.path.join(workdir, f"dbos-{submitters}-{uuid.uuid4().hex[:8]}.sqlite")
    config: DBOSConfig = {
        "name": "acpctl-bench",
        "system_database_url": f"sqlite:///{path}",
        "log_level": "WARNING",
        "console_log_level": "WARNING",
    }
    logging.getLogger("dbos").setLevel(logging.WARNING)
    command = _workflow()
    DBOS(config=config)
    DBOS.launch()
    try:
        share, extra = divmod(commands, submitters)
        counts = [share + (1 if i < extra else 0) for i in range(submitters)]
        barrier = threading.Barrier(submitters + 1)
        errors: list[BaseException] = []

        def submit(index: int, count: int) -> None:
            try:
                barrier.wait()
                for i in range(count):
                    out = command({"n": i, "by": index})
                    if out["echo"] != i:
                        raise RuntimeError(f"workflow returned {out!r}")
            except BaseException as exc:
                errors.append(exc)
                with contextlib.suppress(threading.BrokenBarrierError):
                    barrier.abort()

        threads = [
            threading.Thread(target=submit, args=(i, n), daemon=True) for i, n in enumerate(counts)
        ]
        for thread in threads:
            thread.start()
        barrier.wait()
        start = now()
        for thread in threads:
            thread.join()
        elapsed = now() - start
        if errors:
            raise RuntimeError(f"{len(errors)} DBOS submitter(s) failed") from errors[0]
        return sum(counts), elapsed
    finally:
        DBOS.destroy()
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path + suffix)
