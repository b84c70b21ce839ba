"""What the store's writer says to PostgreSQL, counted from libpq's own protocol trace.

``traced_writer(store, path)`` turns on libpq's trace (``PQtrace``) of the write connection
for the duration of a ``with`` block, from the writer thread itself (a write that does
nothing else), and ``count(path)`` reads it back:

- *statements*: those the server ran (``CommandComplete`` or ``ErrorResponse``; ``BEGIN``
  and ``COMMIT`` included, each statement of a message that holds several);
- *round trips*: how many times the client stopped sending and read the server's answer
  (a run of frontend messages followed by a backend one). A statement on its own is one;
  statements sent in one message, or one pipeline, before reading are one together.

The trace costs a line of file output per message: count on its own turns, never on turns
that are timed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from store import Store
from store.writer import WriteContext


@dataclass(frozen=True)
class Trace:
    statements: int
    round_trips: int


def _pgconn(ctx: WriteContext) -> Any:
    driver: Any = ctx.conn.connection.driver_connection
    return driver.pgconn


@contextmanager
def traced_writer(store: Store, path: str) -> Iterator[None]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:

        def start(ctx: WriteContext) -> None:
            from psycopg.pq import Trace as Flags

            pgconn = _pgconn(ctx)
            pgconn.trace(os.dup(fd))  # libpq owns (and closes) its FILE*
            pgconn.set_trace_flags(Flags.SUPPRESS_TIMESTAMPS)

        store.write(start)
        yield
    finally:
        # From the writer thread too: libpq's FILE* is flushed by PQuntrace.
        store.write(lambda ctx: _pgconn(ctx).untrace())
        os.close(fd)


def count(path: str) -> Trace:
    """The statements and round trips in a trace file. The first and the last transaction
    of the trace are the two writes that started and stopped it: 2 statements and 2 round
    trips are theirs (half of each), taken off."""
    statements = trips = 0
    sending = False
    with open(path, encoding="utf-8", errors="replace") as trace:
        for line in trace:
            parts = line.split("\t")
            if len(parts) < 3:
                continue
            direction, message = parts[0], parts[2].split(" ", 1)[0].strip()
            if direction == "F":
                sending = True
                continue
            if message in ("CommandComplete", "ErrorResponse"):
                statements += 1
            if direction == "B" and sending:
                trips += 1
                sending = False
    return Trace(max(0, statements - 2), max(0, trips - 2))
