"""A store writer that stands still in the middle of a PostgreSQL write transaction
(tests/integration/test_stalled_writer.py).

    python -m tests.support.stalled_writer DB NODE_ID STALLED_WRITE_S

Registers node NODE_ID, prints ``ready``, then renews its lease with ``running=1`` and,
inside that transaction (the row locked), prints ``locked`` and waits for a line on stdin
(the test stops it with SIGSTOP meanwhile). Then it prints what became of that write
(``first ok`` or ``first refused <error class>``) and of a second write on the same store
(``second ok`` or ``second refused ...``).

It waits on stdin rather than stopping itself: a process that sent itself SIGSTOP from its
writer thread was seen running again within milliseconds on a loaded machine, its
transaction committed, with no SIGCONT sent by the test (cause not found).
"""

from __future__ import annotations

import sys

from store import Store, StoreOptions
from store.ops import nodes as node_ops
from store.writer import WriteContext

LEASE_S = 600.0


def _outcome(store: Store, node_id: str, name: str, running: int, stop: bool) -> None:
    def renew(ctx: WriteContext) -> float | None:
        until = node_ops.renew(ctx, node_id, LEASE_S, running)
        if stop:
            print("locked", flush=True)
            sys.stdin.readline()
        return until

    try:
        store.write(renew, timeout=60)
    except Exception as exc:
        print(f"{name} refused {type(exc).__name__}", flush=True)
    else:
        print(f"{name} ok", flush=True)


def main(argv: list[str]) -> int:
    db, node_id, stalled_s = argv[0], argv[1], float(argv[2])
    spec = node_ops.NodeSpec(id=node_id, name="stalled", labels=(), capacity=1)
    with Store.open(db, StoreOptions(stalled_write_s=stalled_s)) as store:
        store.write(lambda ctx: node_ops.register(ctx, spec, LEASE_S))
        print("ready", flush=True)
        _outcome(store, node_id, "first", running=1, stop=True)
        _outcome(store, node_id, "second", running=3, stop=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
