"""The least a process between an ACP client and its agent costs: a relay with no store.

``python bench/relay.py MODE -- AGENT ARGV...`` starts the agent and copies its stdio to and
from its own, both ways, on one asyncio loop:

* ``bytes``: whatever one read of a pipe returns is written on at once, unparsed (the floor of
  any process in the middle: two more pipe hops and a Python loop's wake-ups);
* ``threads``: the same without an event loop: two threads, each a blocking ``os.read`` ->
  ``os.write`` loop (the least Python per read there is);
* ``frames``: each newline-ended JSON-RPC frame is parsed (``json.loads``) and written again
  (``json.dumps``), one write per read of the pipe (the least a middle that understands the
  frames does, with the standard library's C codec).

``bench/serve_overhead.py --relays`` times a turn through each beside ``acpctl serve`` and the
direct client, so the ratio the issue asks of serve can be read against what any Python
process in the middle costs on the same machine. Not part of the product.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable

MODES = ("bytes", "threads", "frames")
READ_SIZE = 1 << 16


async def _pump(
    reader: asyncio.StreamReader, send: Callable[[bytes], object], frames: bool
) -> None:
    """Copy ``reader`` to ``send`` until end of file; with ``frames``, each complete line
    parsed and written again (a partial line waits for the rest)."""
    pending = b""
    while chunk := await reader.read(READ_SIZE):
        if not frames:
            send(chunk)
            continue
        pending += chunk
        *lines, pending = pending.split(b"\n")
        out = [json.dumps(json.loads(line), separators=(",", ":")) for line in lines if line]
        if out:
            send(("\n".join(out) + "\n").encode())


async def relay(mode: str, argv: list[str]) -> int:
    loop = asyncio.get_running_loop()
    agent = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=READ_SIZE
    )
    assert agent.stdin is not None and agent.stdout is not None
    stdin = asyncio.StreamReader(limit=READ_SIZE)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(stdin), os.fdopen(0, "rb", buffering=0)
    )
    out_fd = sys.stdout.fileno()

    def to_client(data: bytes) -> None:
        view = memoryview(data)
        while view:  # a blocking pipe: a short write only when the client is behind
            view = view[os.write(out_fd, view) :]

    frames = mode == "frames"
    to_agent = agent.stdin

    async def client_to_agent() -> None:
        await _pump(stdin, to_agent.write, frames)
        to_agent.close()  # the client's end of file is the agent's: it exits, and so do we

    client_side = asyncio.ensure_future(client_to_agent())
    await _pump(agent.stdout, to_client, frames)  # the agent's end: the relay's end
    client_side.cancel()
    return await agent.wait()


def _copy(src: int, dst: int) -> None:
    """Blocking copy of one pipe to another until end of file, then close ``dst``."""
    while data := os.read(src, READ_SIZE):
        view = memoryview(data)
        while view:
            view = view[os.write(dst, view) :]
    os.close(dst)


def relay_threads(argv: list[str]) -> int:
    agent = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert agent.stdin is not None and agent.stdout is not None
    to_agent = threading.Thread(target=_copy, args=(0, agent.stdin.fileno()), daemon=True)
    to_agent.start()
    _copy(agent.stdout.fileno(), sys.stdout.fileno())  # the agent's end: the relay's end
    return agent.wait()


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in MODES or argv[1] != "--":
        print(f"usage: relay.py {{{'|'.join(MODES)}}} -- AGENT ARGV...", file=sys.stderr)
        return 2
    try:
        if argv[0] == "threads":
            return relay_threads(argv[2:])
        return asyncio.run(relay(argv[0], argv[2:]))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
