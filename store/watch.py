"""``Store.watch``: the one way to hear what the store committed.

Every commit of this process's writer is published once (store/commit_feed.py); a watcher
subscribes to the part it needs and gets the committed data itself, never a bare "something
changed" that it would have to read back:

- ``session(id, wake)``: a mailbox of one session's commits, its appended events and the
  commands it finished (``SessionWatch``, store/feed.py). Serve's turn streams, the remote
  front end's follows, ``ControlPlane.events``/``follow`` and the async API read from it.
- ``command(id)``: the finished ``CommandRecord`` of one command, from the commit that makes
  it final (``CommandWait``). ``wait()`` and a subagent's ``subagent_result`` wait on it.
- ``appends(listener)``: every commit's appends and the bindings it created, for delivery's
  projectors (they take the events from the commit and read the log only to catch up; a
  spawned session's bindings need no read).

What another process or node commits is not published here; session watchers get it
read back from the log: on PostgreSQL once the node's listener hears the session's
notification (store/listen.py), on SQLite once the poller of ``PRAGMA data_version`` sees
another connection commit (store/sqlite_watch.py). Command waits and ``appends`` see this
process's commits only: each caller keeps a slow fallback read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from types import TracebackType

from store.command_waits import CommandWaits
from store.commit_feed import AppendsListener, CommitFeed
from store.feed import WATCH_LIMIT, Keep, SessionWatch, Wake
from store.records import CommandRecord

# The session's last seq in the log before a watch opens (None: not needed, SQLite).
LastSeq = Callable[[str], int | None]


class CommandWait:
    """The record of one command as the commit that finishes it carries it. Open it before
    reading the command once, so that no finish falls between the read and the watch;
    ``close()`` (or ``with``) when done."""

    def __init__(self, waits: CommandWaits, command_id: str) -> None:
        self.command_id = command_id
        self._waits = waits
        self._future: Future[CommandRecord] = waits.expect(command_id)
        self._wrapped: asyncio.Future[CommandRecord] | None = None

    def result(self, timeout: float) -> CommandRecord | None:
        """The finished record, or None if no commit of this process finished it within
        ``timeout`` seconds (any thread)."""
        try:
            return self._future.result(timeout)
        except FutureTimeout:
            return None

    async def result_async(self, timeout: float) -> CommandRecord | None:
        """``result`` for an asyncio loop, without a thread. A timeout leaves the wait open
        (``asyncio.wait`` does not cancel what it waits for), so it can be awaited again."""
        if self._wrapped is None:
            self._wrapped = asyncio.wrap_future(self._future)
        done, _ = await asyncio.wait({self._wrapped}, timeout=timeout)
        return self._wrapped.result() if done else None

    def close(self) -> None:
        self._waits.forget(self.command_id, self._future)

    def __enter__(self) -> CommandWait:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class StoreWatch:
    """See the module docstring: ``store.watch.session / command / appends``."""

    def __init__(self, commits: CommitFeed, last_seq: LastSeq) -> None:
        self._commits = commits
        self._last_seq = last_seq

    def session(
        self,
        session_id: str,
        wake: Wake,
        limit: int = WATCH_LIMIT,
        keep: Keep | None = None,
        finished: bool = True,
    ) -> SessionWatch:
        """A mailbox of each commit that appends events to ``session_id`` or finishes one of
        its commands, from now on: ``wake()`` is called on the writer thread when it stops
        being empty (keep it as short as ``call_soon_threadsafe``), and ``take()`` on the
        watcher's own thread returns the committed events and records themselves, in commit
        order (store/feed.py). ``keep`` picks the events wanted, ``finished=False`` leaves
        the finished commands out: what is not wanted never wakes the watcher. It also
        gets what other processes and nodes commit for it, read back from the log (the
        module docstring). ``close()`` stops it."""
        return self._commits.sessions.watch(
            session_id, wake, self._last_seq(session_id), limit, keep, finished
        )

    def command(self, command_id: str) -> CommandWait:
        """The command's finished record from the commit of this process that makes it
        final (store/command_waits.py)."""
        return CommandWait(self._commits.commands, command_id)

    def appends(self, listener: AppendsListener) -> Callable[[], None]:
        """``listener(appended, bound)`` on the writer thread after each commit that
        appended events or created bindings: the commit's appends (``Appended``: the events,
        their seqs and global ids; ``appended_events`` makes records of one) and the
        ``BindingRecord``s it created (a spawn's is in the commit of the session's first
        event). Read them, never change them, and keep it short. Returns an unsubscribe
        function."""
        return self._commits.on_appends(listener)
