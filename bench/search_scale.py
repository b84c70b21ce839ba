"""Search and the session list at scale (issue 42): a store of ``--sessions`` sessions
(default 100,000) holding ``--events`` events (default 10,000,000) and their search
documents, filled by ``store/synthetic.py`` (two turns a session, streamed chunks of
made-up words whose frequencies follow a Zipf law), then, interleaved round by round:

- ``search ...``: ``Store.search`` for a word in few documents (rare), in about one in a
  hundred (medium), in most (common), two words, a phrase, a prefix, with a state filter,
  and the second page of a common word (its cursor);
- ``list ...``: a page of 50 of the newest-updated list (``Store.sessions_page``), its first
  page, a page deep in it (a cursor from the middle), and a page of one state;
- ``floor``: one session read by its id on the same store (``Store.get_session``), the least
  any read through the store costs: each case's ratio to it is printed.

Targets: search p50 (over the query mix) at most 50 ms; a page of the list at most 20 ms.
Seeding takes minutes at full size: ``--keep DIR`` keeps the store there and reuses it.

    python bench/search_scale.py [--sessions 100000] [--events 10000000] [--rounds 25]
                                 [--keep DIR] [--postgresql] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:
    sys.path.insert(0, _REPO_ROOT)

from bench._common import machine_info, median, percentile, positive_int, progress  # noqa: E402
from state_machines import SessionState  # noqa: E402
from store import Store, queries  # noqa: E402
from store.queries.search import SearchFilters  # noqa: E402
from store.search_query import SearchQuery  # noqa: E402
from store.synthetic import Vocabulary, analyze, seed  # noqa: E402

SEARCH_P50_MS = 50.0
LIST_PAGE_MS = 20.0
VOCABULARY = 20_000
PAGE = 50


def _store(args: argparse.Namespace, workdir: Path, vocab: Vocabulary) -> Store:
    path = workdir / "scale.db"
    fresh = args.postgresql is not None or not path.exists()
    store = Store.open(args.postgresql or path)
    if fresh:
        started = time.monotonic()
        per = max(8, args.events // args.sessions)
        seed(
            store,
            args.sessions,
            per,
            vocab,
            random.Random(7),
            progress=lambda n: (
                progress(f"seeded {n}/{args.sessions} sessions") if n % 10_000 == 0 else None
            ),
        )
        analyze(store)
        progress(f"seeded in {time.monotonic() - started:.0f} s")
    return store


def _cases(store: Store, vocab: Vocabulary) -> dict[str, Callable[[], Any]]:
    by_rank = vocab.words
    rare, medium, common = by_rank[15_000], by_rank[300], by_rank[2]
    # A phrase that is in the store: two words of a seeded prompt, in order.
    some = store.sessions_page((), None, 1)[0][0]
    prompt = next(e for e in store.events(some.id) if e.kind == "prompt")
    words = prompt.payload["content"][0]["text"].split()
    phrase = f'"{words[3]} {words[4]}"'
    first_common = store.search(SearchQuery.parse(common), SearchFilters(), 20)
    cursor = first_common[-1].doc_id

    def search(text: str, filters: SearchFilters | None = None) -> Callable[[], Any]:
        parsed = SearchQuery.parse(text)
        return lambda: store.search(parsed, filters or SearchFilters(), 20)

    ids = [s.id for s in store.sessions_page((), None, 500)[0]]
    deep_cursor = _deep_cursor(store)
    rng = random.Random(3)
    return {
        "search rare word": search(rare),
        "search medium word": search(medium),
        "search common word": search(common),
        "search two words": search(f"{medium} {common}"),
        "search phrase": search(phrase),
        "search prefix": search(medium[:4] + "*"),
        "search state=error": search(medium, SearchFilters(states=(SessionState.ERROR,))),
        "search page 2": search(common, SearchFilters(before=cursor)),
        "list first page": lambda: store.sessions_page((), None, PAGE),
        "list deep page": lambda: store.sessions_page((), deep_cursor, PAGE),
        "list state=closed": lambda: store.sessions_page((SessionState.CLOSED,), None, PAGE),
        "floor": lambda: store.get_session(rng.choice(ids)),
    }


def _deep_cursor(store: Store) -> tuple[float, str]:
    """A cursor halfway down the list (walked there by pages of at most 1,000)."""
    half = max(1, sum(store.read(queries.count_sessions_by_state).values()) // 2)
    cursor = None
    walked = 0
    while walked < half:
        page, cursor = store.sessions_page((), cursor, min(1000, half - walked))
        walked += len(page)
        assert cursor is not None, "fewer sessions than counted"
    assert cursor is not None
    return cursor


def run(args: argparse.Namespace) -> dict[str, Any]:
    if not args.postgresql:
        args.postgresql = None
        return _run(args)
    from tests.support.postgres import PostgresServer, find_server_binaries

    bin_dir = find_server_binaries()
    if bin_dir is None:
        raise SystemExit("PostgreSQL server binaries not found: apt-get install postgresql")
    with PostgresServer(bin_dir, fsync=True) as server:
        args.postgresql = server.create_database()
        return _run(args)


def _run(args: argparse.Namespace) -> dict[str, Any]:
    vocab = Vocabulary.make(VOCABULARY, random.Random(1))
    with tempfile.TemporaryDirectory(prefix="acpctl-search-") as tmp:
        workdir = Path(args.keep) if args.keep else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        store = _store(args, workdir, vocab)
        try:
            cases = _cases(store, vocab)
            times: dict[str, list[float]] = {name: [] for name in cases}
            order = list(cases)
            for round_no in range(args.rounds):
                random.Random(round_no).shuffle(order)  # interleaved, in a new order each round
                for name in order:
                    started = time.perf_counter()
                    cases[name]()
                    times[name].append((time.perf_counter() - started) * 1000)
            size_mb = 0.0 if args.postgresql else (workdir / "scale.db").stat().st_size / 2**20
        finally:
            store.close()
    floor = median(times["floor"])
    table = {
        name: {
            "p50_ms": median(t),
            "p95_ms": percentile(t, 0.95),
            "x_floor": median(t) / floor,
        }
        for name, t in times.items()
    }
    search_all = [v for name, t in times.items() if name.startswith("search") for v in t]
    list_worst = max(v["p50_ms"] for name, v in table.items() if name.startswith("list"))
    return {
        "backend": "postgresql" if args.postgresql else "sqlite",
        "sessions": args.sessions,
        "events": args.events,
        "rounds": args.rounds,
        "store_mb": round(size_mb),
        "cases": table,
        "search_p50_ms": median(search_all),
        "search_p50_target_ms": SEARCH_P50_MS,
        "list_page_p50_ms": list_worst,
        "list_page_target_ms": LIST_PAGE_MS,
        "floor_p50_ms": floor,
        "machine": machine_info(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=positive_int, default=100_000)
    parser.add_argument("--events", type=positive_int, default=10_000_000)
    parser.add_argument("--rounds", type=positive_int, default=25)
    parser.add_argument("--keep", help="keep (and reuse) the seeded store in this directory")
    parser.add_argument(
        "--postgresql",
        action="store_true",
        help="on a throwaway PostgreSQL server (tests/support/postgres.py) instead of SQLite",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{result['backend']}: {args.sessions:,} sessions, {args.events:,} events, "
        f"store {result['store_mb']} MB"
    )
    print(f"{'case':<22} {'p50 ms':>8} {'p95 ms':>8} {'x floor':>8}")
    for name, row in result["cases"].items():
        print(f"{name:<22} {row['p50_ms']:8.2f} {row['p95_ms']:8.2f} {row['x_floor']:8.1f}")
    print(
        f"search p50 {result['search_p50_ms']:.1f} ms (target <= {SEARCH_P50_MS:.0f}); "
        f"slowest list page p50 {result['list_page_p50_ms']:.1f} ms "
        f"(target <= {LIST_PAGE_MS:.0f})"
    )


if __name__ == "__main__":
    main()
