"""The relays ``bench/serve_overhead.py --relays`` times beside serve: each a process between
the client and an agent of its own that keeps nothing of serve (``bench/relay.py``,
``bench/relay.c``). What they cost against the direct client is the floor for any process in
the middle on the machine, and, for the C relay with ``--db``, for one that is durable first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Collection

_BENCH = os.path.dirname(os.path.abspath(__file__))
RELAY_SCRIPT = os.path.join(_BENCH, "relay.py")
RELAY_C_SOURCE = os.path.join(_BENCH, "relay.c")

# Side name -> (its label, bench/relay.py's mode; None: the C relay, durable or not).
RELAYS: dict[str, tuple[str, str | None]] = {
    "relay-bytes": ("byte relay, asyncio", "bytes"),
    "relay-threads": ("byte relay, 2 threads", "threads"),
    "relay-frames": ("frame relay (json in/out)", "frames"),
    "relay-c": ("byte relay, C (poll)", None),
    "relay-c-durable": ("durable relay, C + SQLite", None),
}
LABELS = {name: label for name, (label, _) in RELAYS.items()}


def build_c_relay(workdir: str) -> str | None:
    """``bench/relay.c`` built in ``workdir`` (linked with SQLite); None without a C compiler
    or SQLite's headers (``libsqlite3-dev``)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    binary = os.path.join(workdir, "relay")
    built = subprocess.run(
        [compiler, "-O2", "-o", binary, RELAY_C_SOURCE, "-lsqlite3"],
        capture_output=True,
        text=True,
    )
    return binary if built.returncode == 0 else None


# The relay serve's turn is held to (bench/serve_overhead.py's target): the least a process
# that writes every frame durably before passing it on costs on this machine.
DURABLE = "relay-c-durable"


def relay_commands(
    workdir: str, agent_argv: Callable[[str], list[str]], names: Collection[str] | None = None
) -> tuple[list[tuple[str, list[str]]], str | None]:
    """Each relay side's name and command line (all, or ``names``), in front of
    ``agent_argv(tag)`` (an agent of its own per side), and why the C relays are left out,
    when they are (else None)."""
    sides: list[tuple[str, list[str]]] = []
    binary = build_c_relay(workdir)
    for name, (_, mode) in RELAYS.items():
        if names is not None and name not in names:
            continue
        agent = agent_argv(name)
        if mode is not None:
            sides.append((name, [sys.executable, RELAY_SCRIPT, mode, "--", *agent]))
        elif binary is not None:
            durable = name == "relay-c-durable"
            db = ["--db", os.path.join(workdir, f"{name}.db")] if durable else []
            sides.append((name, [binary, *db, *agent]))
    missing = None if binary else "no C compiler or no SQLite headers: no C relays"
    return sides, missing
