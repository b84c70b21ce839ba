"""SQLite: a session watcher hears another process's commits on the same file within a
moment (store/sqlite_watch.py), with no gap and no duplicate, also mixed with this process's
own commits; the poller checks the file only while some session is watched."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from store import NewEvent, Store
from store.sqlite_watch import POLL_ENV, OtherWriters
from tests.support.spawned import spawned_session

# Another process's commit reaches a watcher here within this (the poller checks every
# 50 ms; the bound leaves room for a 2-core machine running other tests beside this one).
ARRIVES_WITHIN_S = 1.0
COUNT = 20


def _appender(db: Path, session_id: str, count: int, interval_s: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.sqlite_appender", str(db), session_id,
         str(count), str(interval_s)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _poller(store: Store) -> OtherWriters:
    assert store.other_writers is not None
    return store.other_writers


def test_a_watcher_gets_another_processs_commits_at_once_with_no_gap_and_no_duplicate(
    tmp_path: Path,
) -> None:
    db = tmp_path / "cp.db"
    with Store.open(db) as store:
        sid, _ = spawned_session(store, tmp_path)
        start_seq = store.events(sid)[-1].seq
        woken = threading.Event()
        watch = store.watch.session(sid, woken.set)
        seqs: list[int] = []
        lags: list[float] = []
        other = _appender(db, sid, COUNT, 0.05)
        own = 0
        deadline = time.monotonic() + 15
        while len(seqs) < 2 * COUNT and time.monotonic() < deadline:
            if own < COUNT:  # this process's own commits, between the other's
                store.append_events(sid, None, [NewEvent("session_update", {"own": own})])
                own += 1
            woken.wait(0.05)
            woken.clear()
            taken = watch.take()
            arrived = time.time()
            for event in taken.events:
                seqs.append(event.seq)
                if "at" in event.payload:
                    lags.append(arrived - event.payload["at"])
        assert other.wait(30) == 0
        watch.close()
    assert seqs == list(range(start_seq + 1, start_seq + 1 + 2 * COUNT))  # all, once, in order
    assert len(lags) == COUNT
    assert max(lags) < ARRIVES_WITHIN_S, lags


def test_a_commit_made_before_the_watch_opened_is_not_taken_again(tmp_path: Path) -> None:
    db = tmp_path / "cp.db"
    with Store.open(db) as store:
        sid, _ = spawned_session(store, tmp_path)
        assert _appender(db, sid, 3, 0).wait(30) == 0
        watch = store.watch.session(sid, lambda: None)
        time.sleep(0.3)  # several rounds: the fresh check and a few data_version checks
        assert watch.take().events == []
        watch.close()


def test_the_poller_checks_only_while_a_session_is_watched(tmp_path: Path) -> None:
    with Store.open(tmp_path / "cp.db") as store:
        poller = _poller(store)
        sid, _ = spawned_session(store, tmp_path)
        time.sleep(0.2)
        assert (poller.polls, poller.polling) == (0, False)  # never watched: never checked
        first = store.watch.session(sid, lambda: None)
        second = store.watch.session(sid, lambda: None)
        time.sleep(0.3)
        assert poller.polling and poller.polls >= 2
        first.close()
        assert poller.polling  # one watcher is left
        second.close()
        assert not poller.polling
        time.sleep(0.1)  # a round under way ends
        parked = poller.polls
        time.sleep(0.5)
        assert poller.polls == parked  # the last watcher closed: no more checks
        again = store.watch.session(sid, lambda: None)
        time.sleep(0.2)
        assert poller.polls > parked
        again.close()


def test_the_setting_turns_the_poller_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(POLL_ENV, "0")
    with Store.open(tmp_path / "cp.db") as store:
        assert store.other_writers is None
