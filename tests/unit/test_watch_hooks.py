"""``SessionFeeds.follow_watched``: told of a session's first watch and of its last unwatch
(what a PostgreSQL node's listener LISTENs and UNLISTENs by, store/listen.py)."""

from __future__ import annotations

from store.feed import SessionFeeds


def test_the_hook_hears_each_sessions_first_watch_and_last_unwatch_only() -> None:
    feeds = SessionFeeds()
    before = feeds.watch("s0", lambda: None)
    told: list[tuple[str, bool]] = []
    assert feeds.follow_watched(lambda sid, on: told.append((sid, on))) == ["s0"]
    one = feeds.watch("s1", lambda: None)
    two = feeds.watch("s1", lambda: None)
    assert told == [("s1", True)]  # the second watch of s1 changes nothing to listen to
    one.close()
    assert told == [("s1", True)]
    two.close()
    two.close()  # closing twice is told once
    before.close()
    assert told == [("s1", True), ("s1", False), ("s0", False)]
    assert feeds.follow_watched(None) == []
    feeds.watch("s2", lambda: None).close()
    assert len(told) == 3  # no hook: nobody told
