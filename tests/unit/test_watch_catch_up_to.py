"""``SessionFeeds.catch_up_to``: a newly watched session whose log ends past what its watch
was offered (another process's commit fell between the watch's position read and its
opening, store/sqlite_watch.py) reads the log; one that ends there reads nothing."""

from __future__ import annotations

from store.feed import CommittedEvent, SessionFeeds

SID = "s1"
LOG = [CommittedEvent(SID, seq, None, "session_update", "{}", 0.0) for seq in range(1, 8)]


def test_a_watch_reads_the_log_only_when_it_ends_past_what_the_watch_knows() -> None:
    feeds = SessionFeeds()
    reads: list[int] = []

    def read_after(_sid: str, after: int) -> list[CommittedEvent]:
        reads.append(after)
        return [e for e in LOG if e.seq > after]

    feeds.read_after = read_after
    feeds.read_finished = lambda _sid, _since: []
    wakes: list[int] = []
    watch = feeds.watch(SID, lambda: wakes.append(1), last_seq=5)
    feeds.catch_up_to(SID, 5)  # the log ends where the watch starts: nothing to read
    assert not watch.reads_log and wakes == []
    feeds.catch_up_to(SID, 7)  # two commits fell in between
    assert watch.reads_log and wakes == [1]
    assert [e.seq for e in watch.take().events] == [6, 7]
    assert reads == [5]
    feeds.catch_up_to(SID, 7)  # the take moved the watch on: nothing more
    assert not watch.reads_log
    feeds.catch_up_to("other", 99)  # a session nobody watches: nothing
    watch.close()
