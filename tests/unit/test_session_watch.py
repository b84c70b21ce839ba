"""A session watch's catch-up from the log (store/feed.py), with the log's reads stood in:
the order of its two reads against a commit that lands between them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from store.feed import CommittedEvent, SessionFeeds

SID = "s1"
EVENTS = [CommittedEvent(SID, seq, "c1", "session_update", "{}", 0.0) for seq in (1, 2, 3)]
END: Any = SimpleNamespace(id="c1", session_id=SID)  # the command's final record


def test_an_end_read_from_the_log_never_comes_without_its_events() -> None:
    """The turn's events and its end commit together, right after whichever read of the
    catch-up runs first: a take that hands on the end has handed on every event before it."""
    committed = False

    def commit_after(result: Any) -> Any:
        nonlocal committed
        committed = True
        return result

    feeds = SessionFeeds()
    feeds.read_after = lambda _sid, after: commit_after(
        [e for e in EVENTS if committed and e.seq > after]
    )
    feeds.read_finished = lambda _sid, _since: commit_after([END] if committed else [])
    wakes: list[int] = []
    watch = feeds.watch(SID, lambda: wakes.append(1), last_seq=0)
    watch.stale()  # another node's commit was announced: the next take reads the log
    assert wakes == [1] and watch.reads_log

    taken = [watch.take()]
    feeds.catch_up(SID)  # the notification of the commit that landed between the reads
    taken.append(watch.take())

    seqs = [e.seq for share in taken for e in share.events]
    assert seqs == [1, 2, 3]
    ends = [i for i, share in enumerate(taken) for r in share.finished if r.id == "c1"]
    assert ends == [1] or (ends == [0] and [e.seq for e in taken[0].events] == [1, 2, 3])
