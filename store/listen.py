"""PostgreSQL ``LISTEN``: hear at once that a session changed on another node.

Writes that give a session new work, a cancel or a close send ``pg_notify`` (delivered on
commit; store/ops/_shared.py ``notify_session``). Each node listens on one connection of
its own and hands every session id to ``on_session``. It is an accelerator, never the only
path: notifications sent while this connection was down are lost, so the supervisor's
periodic discovery still finds the work (the fallback the issue calls polling), and after
a reconnect ``on_reconnect`` lets it look at once.

A notification this node's own writer sent (``own_pid``: the server process it commits on)
is skipped: the commit already reached this node's session watchers (from memory,
store/feed.py) and its actors (told by the code that wrote), as on SQLite, which has no
LISTEN at all. Handing it over would read the log and wake the actor once more per write.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from store.location import StoreLocation
from store.ops._shared import SESSIONS_CHANNEL

log = logging.getLogger(__name__)


class SessionNotifications:
    def __init__(
        self,
        location: StoreLocation,
        on_session: Callable[[str], None],
        on_reconnect: Callable[[], None],
        own_pid: Callable[[], int | None] = lambda: None,
    ) -> None:
        self._location = location
        self._own_pid = own_pid
        self._on_session = on_session
        self._on_reconnect = on_reconnect
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="store-listen", daemon=True)
        self.received = 0
        self.skipped = 0  # this node's own commits' notifications

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        import psycopg
        from sqlalchemy.engine import make_url

        url = make_url(self._location.target)
        dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        backoff = 0.1
        first = True
        while not self._stop.is_set():
            try:
                with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(f"LISTEN {SESSIONS_CHANNEL}")
                    if not first:
                        self._on_reconnect()  # what was sent while we were away
                    first, backoff = False, 0.1
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=1.0):
                            self.received += 1
                            if note.pid == self._own_pid():
                                self.skipped += 1
                                continue
                            self._hand_over(note.payload)
            except psycopg.Error as exc:
                log.warning(
                    "listening for session changes failed (%s); again in %.1f s", exc, backoff
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _hand_over(self, session_id: str) -> None:
        try:
            self._on_session(session_id)
        except Exception:  # a bad handler must not end the listening
            log.exception("handling a change of session %s failed", session_id)
