"""Another process writing to a session on a shared SQLite file (tests/integration/
test_sqlite_watch.py): nothing in the watching process's memory hears of its commits.

    python -m tests.support.sqlite_appender DB SESSION_ID COUNT INTERVAL_S

Appends COUNT events to the session, one commit each, INTERVAL_S apart; each event's payload
holds ``at``, the wall time just before its commit. Prints ``done`` at the end.
"""

from __future__ import annotations

import sys
import time

from store import NewEvent, Store


def main(argv: list[str]) -> int:
    db, session_id, count, interval_s = argv[0], argv[1], int(argv[2]), float(argv[3])
    with Store.open(db) as store:
        for i in range(count):
            time.sleep(interval_s)
            store.append_events(
                session_id, None, [NewEvent("session_update", {"i": i, "at": time.time()})]
            )
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
