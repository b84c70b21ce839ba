"""PostgreSQL ``LISTEN``: hear at once what another node wrote, if it concerns this node.

Channels (names in store/ops/_shared.py; hashes, so any id makes a valid identifier):

- **work**, ``acpctl_n_<md5(owner id)>``: one per node. A write that gives a session new
  work, a cancel or a close calls ``notify_session`` and reaches the session's owner here.
- **unowned**, ``acpctl_unowned``: every node. The same writes for a session with no owner,
  or whose owner's listener is not connected (it died, or is reconnecting): somebody's
  discovery claims it at once.
- **session**, ``acpctl_s_<md5(session id)>``: one per session, listened to only while this
  node has a watcher of it (``SessionFeeds.watch``, store/feed.py). A group commit that
  appended to a session or finished one of its commands sends it (store/writer.py), and so
  does ``notify_session`` unless told ``watchers=False`` (a queued command: no event).

So a node that neither owns nor watches a session hears nothing of it. Whether an owner's
listener is connected the write learns from an advisory lock that listener holds while
connected (``LISTENER_LOCK_CLASS``): a lock try, no read of ``nodes`` in the writer's
serializable transaction, no round trip more than the one ``pg_notify`` statement.

The contract other code relies on:

1. A write on any node that calls ``notify_session(ctx, session_id)`` reaches, on commit,
   the session's owner (``on_work``; with no owner listening: every node's) and every node
   that watches the session (``on_stream``).
2. A node that opens a session watch (``store.watch.session`` / ``SessionFeeds.watch``)
   hears that session's stream notifications while the watch is open. The ``LISTEN`` is
   issued by this thread within milliseconds; once it is, ``on_stream`` is called once for
   the session, so a commit that fell between the watch's opening and the ``LISTEN`` is
   read from the log, never missed.

It is an accelerator, never the only path: notifications sent while this connection was
down are lost, so the supervisor's periodic discovery still finds the work, and after a
reconnect every watched session is listened to again and caught up (``on_stream``), and
``on_reconnect`` lets discovery look at once.

A notification this node's own writer sent (``own_pid``: the server process it commits on)
is counted and skipped: the commit already reached this node's session watchers (from
memory, store/feed.py) and its actors (told by the code that wrote), as on SQLite, which
has no LISTEN at all.

``counts`` says what PostgreSQL delivered to this node, by channel kind: ``work``,
``unowned``, ``session`` (this node's own included), and ``own`` (of those, the ones its
own writer sent and that were skipped). The listening thread owns the connection; the
watch hooks (any thread) only queue a change and wake it through a pipe.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import select
import threading
from collections.abc import Callable
from typing import Any, Protocol

from store.location import StoreLocation
from store.ops._shared import (
    LISTENER_LOCK_CLASS,
    SESSION_PREFIX,
    UNOWNED_CHANNEL,
    WORK_PREFIX,
    owner_key_sql,
)

log = logging.getLogger(__name__)

KINDS = ("work", "unowned", "session", "own")
_IDLE_WAIT_S = 1.0  # the longest wait for the socket before looking at the stop flag again
_LOCK_RETRY_S = 0.1  # while the listener lock is not held (a write holds it for a moment)


def work_channel(owner: str) -> str:
    return WORK_PREFIX + hashlib.md5(owner.encode()).hexdigest()


def session_channel(session_id: str) -> str:
    return SESSION_PREFIX + hashlib.md5(session_id.encode()).hexdigest()


class ListenedStore(Protocol):
    """What the listener needs of the store (``Store``)."""

    @property
    def location(self) -> StoreLocation: ...

    @property
    def own_backend_pid(self) -> int | None: ...

    def catch_up(self, session_id: str) -> None: ...

    def follow_watched(self, hook: Callable[[str, bool], None] | None) -> list[str]: ...


class SessionNotifications:
    """A node's listener (see the module docstring): ``on_work`` for what it hears on its
    work channel and the unowned one, ``store.catch_up`` for a session's channel, and
    ``on_reconnect`` after its connection was lost."""

    def __init__(
        self,
        store: ListenedStore,
        owner: str,
        on_work: Callable[[str], None],
        on_reconnect: Callable[[], None],
    ) -> None:
        self._store = store
        self._location = store.location
        self._owner = owner
        self._work_channel = work_channel(owner)
        self._on_work = on_work
        self._on_stream: Callable[[str], None] = store.catch_up  # its watchers read the log
        self._on_reconnect = on_reconnect
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="store-listen", daemon=True)
        self._lock = threading.Lock()
        self._wanted: set[str] = set()  # sessions watched here (any thread changes it)
        self._listening: dict[str, str] = {}  # channel -> session id (this thread changes it)
        self._wake_r = self._wake_w = -1  # the wake-up pipe, made by ``start``
        self.counts: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.reconnects = 0
        self.holds_lock = False  # the listener lock: this node's writes reach it by name
        self.backend_pid: int | None = None  # the server process it listens on

    @property
    def received(self) -> int:
        """Every notification delivered to this node."""
        return self.counts["work"] + self.counts["unowned"] + self.counts["session"]

    @property
    def skipped(self) -> int:
        """Of them, those its own writer sent."""
        return self.counts["own"]

    def listening(self) -> set[str]:
        """The sessions whose channel this node listens to now (for tests and metrics)."""
        with self._lock:
            return set(self._listening.values())

    def start(self) -> None:
        """Listen from now on, to the sessions watched now and to those watched later."""
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        for session_id in self._store.follow_watched(self.set_watched):
            self.set_watched(session_id, True)
        self._thread.start()

    def stop(self) -> None:
        if self._wake_w >= 0:
            self._store.follow_watched(None)
        self._stop.set()
        self._poke_thread()
        if self._thread.is_alive():
            self._thread.join(5)
        if not self._thread.is_alive():
            for fd in (self._wake_r, self._wake_w):
                if fd >= 0:
                    os.close(fd)
            self._wake_r = self._wake_w = -1

    def set_watched(self, session_id: str, watched: bool) -> None:
        """A session's first watch opened (True) or its last closed (False): listen to its
        channel, or stop. Any thread; applied by the listening thread at once."""
        with self._lock:
            if watched:
                self._wanted.add(session_id)
            else:
                self._wanted.discard(session_id)
        self._poke_thread()

    def _poke_thread(self) -> None:
        if self._wake_w < 0:
            return  # not started: ``start`` listens to what is wanted then
        # Full (a wake-up is pending anyway) or closed (stopping): nothing to do.
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    # -- the listening thread --------------------------------------------------------------

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
                    with self._lock:
                        self._listening = {}
                    self.holds_lock = False
                    self.backend_pid = conn.info.backend_pid
                    conn.execute(f"LISTEN {self._work_channel}; LISTEN {UNOWNED_CHANNEL}")
                    self._take_lock(conn)
                    opened = self._apply(conn)
                    if not first:
                        self.reconnects += 1
                        self._on_reconnect()  # the work sent while we were away
                    # What was committed before the LISTENs (or while away) is in the log.
                    self._catch_up(opened)
                    first, backoff = False, 0.1
                    self._listen(conn)
            except psycopg.Error as exc:
                self.holds_lock = False
                log.warning(
                    "listening for session changes failed (%s); again in %.1f s", exc, backoff
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _listen(self, conn: Any) -> None:
        lock_retry = _LOCK_RETRY_S
        while not self._stop.is_set():
            # Notifications that arrived during a statement wait in psycopg's backlog,
            # which this yields first; then whatever the socket has, without waiting.
            for note in conn.notifies(timeout=0):
                self._deliver(note.channel, note.payload, note.pid)
            wait = _IDLE_WAIT_S if self.holds_lock else lock_retry
            ready, _, _ = select.select([conn.fileno(), self._wake_r], [], [], wait)
            if self._wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    while os.read(self._wake_r, 512):
                        pass
            self._catch_up(self._apply(conn))
            if not self.holds_lock:
                self._take_lock(conn)
                # Held elsewhere for longer than a write's moment (another control plane of
                # this process, same owner id): tried less and less often.
                lock_retry = min(lock_retry * 2, _IDLE_WAIT_S)

    def _take_lock(self, conn: Any) -> None:
        """The lock that tells writers this node hears its work channel. A write checking
        it at this moment holds it shared for its transaction: tried again shortly."""
        row = conn.execute(
            f"SELECT pg_try_advisory_lock({LISTENER_LOCK_CLASS}, {owner_key_sql('%s')})",
            (self._owner,),
        ).fetchone()
        self.holds_lock = bool(row and row[0])

    def _apply(self, conn: Any) -> list[str]:
        """LISTEN to the sessions newly watched, UNLISTEN the others; returns the sessions
        newly listened to."""
        with self._lock:
            wanted = {session_channel(sid): sid for sid in self._wanted}
        gone = [ch for ch in self._listening if ch not in wanted]
        new = [ch for ch in wanted if ch not in self._listening]
        if not gone and not new:
            return []
        statements = [f"UNLISTEN {ch}" for ch in gone] + [f"LISTEN {ch}" for ch in new]
        conn.execute("; ".join(statements))
        with self._lock:
            for ch in gone:
                del self._listening[ch]
            for ch in new:
                self._listening[ch] = wanted[ch]
        return [wanted[ch] for ch in new]

    def _catch_up(self, session_ids: list[str]) -> None:
        for session_id in session_ids:
            self._hand_over(self._on_stream, session_id)

    def _deliver(self, channel: str, payload: str, pid: int) -> None:
        if channel.startswith(SESSION_PREFIX):
            kind, handler = "session", self._on_stream
        elif channel == UNOWNED_CHANNEL:
            kind, handler = "unowned", self._on_work
        else:
            kind, handler = "work", self._on_work
        self.counts[kind] += 1
        if pid == self._store.own_backend_pid:
            self.counts["own"] += 1
            return
        self._hand_over(handler, payload)

    @staticmethod
    def _hand_over(handler: Callable[[str], None], session_id: str) -> None:
        try:
            handler(session_id)
        except Exception:  # a bad handler must not end the listening
            log.exception("handling a change of session %s failed", session_id)
