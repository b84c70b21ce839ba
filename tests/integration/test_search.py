"""``acpctl search`` and the store's full-text index (store/search_*.py): what is found (a
prompt, the agent's answer, a tool's title), how words, phrases and prefixes match, the
filters, paging without a duplicate, bad queries, and the migration that indexes a log
written before the index existed. Each backend has its own index: both run by default."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from control_plane import ControlPlane, SearchFilters, SearchQueryError, SessionState
from store import Store
from store.location import locate
from store.search_query import SearchQuery
from tests.support.cp_harness import example_agent, noop_agent, open_cp
from tests.support.direct_sql import is_postgres, query
from tests.support.schema_snapshot import alembic_upgrade

pytestmark = pytest.mark.backend_specific


def _run(cp: ControlPlane, agent_tmp: Path, prompt: str, noop: bool = False) -> str:
    agent = noop_agent() if noop else example_agent(agent_tmp)
    spawned = cp.spawn(agent, agent_tmp, prompt)
    assert spawned.command is not None
    assert cp.wait(spawned.command.id, 60).error is None
    return spawned.session.id


def _found(cp: ControlPlane, text: str, **filters: object) -> list[str]:
    return [h.session.id for h in cp.search(text, SearchFilters(**filters), 50)]  # type: ignore[arg-type]


@pytest.mark.timeout(120)
def test_prompts_answers_and_tool_titles_are_found_by_words_phrases_and_prefixes(
    tmp_path: Path, db: str
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        parser = _run(cp, tmp_path, "please refactor the parser #tool")  # a tool call
        logger = _run(cp, tmp_path, "Déjà vu in the Logger", noop=True)
        hello = _run(cp, tmp_path, "hello world", noop=True)

        assert _found(cp, "refactor") == [parser]
        assert _found(cp, "echo-tool") == [parser]  # the tool call's title
        assert _found(cp, "LOGGER") == [logger]  # any case
        assert _found(cp, '"hello world"') == [hello]
        assert _found(cp, '"world hello"') == []  # a phrase keeps its order
        assert _found(cp, "world hello") == [hello]  # words need not
        assert _found(cp, "hello refactor") == []  # every word must match
        assert _found(cp, "pars*") == [parser]
        assert _found(cp, "pars") == []  # a word is a whole word without its *
        assert _found(cp, "déjà") == [logger]
        if not is_postgres(db):  # FTS5's unicode61 drops accents; PostgreSQL's simple does not
            assert _found(cp, "deja") == [logger]
        assert set(_found(cp, "echo")) == {parser, logger, hello}  # the answers say "Echo:"

        (hit,) = cp.search("refactor")
        assert hit.role == "agent" and "refactor the parser" in hit.snippet
        # Newest match first: the last session to answer comes first.
        assert _found(cp, "echo") == [hello, logger, parser]

        cp.close_session(hello)
        assert _found(cp, "hello", states=(SessionState.CLOSED,)) == [hello]
        assert _found(cp, "hello", states=(SessionState.IDLE,)) == []
        assert _found(cp, "echo", agent="noop-agent") == [hello, logger]
        assert _found(cp, "echo", agent="example-agent") == [parser]
        assert _found(cp, "echo", agent="claude") == []
        assert _found(cp, "echo", since=time.time() + 60) == []


@pytest.mark.timeout(120)
def test_pages_follow_the_cursor_and_show_each_session_once(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        made = [_run(cp, tmp_path, f"needle number {i}", noop=True) for i in range(7)]
        seen: list[str] = []
        before = None
        while True:
            page = cp.search("needle", SearchFilters(before=before), 3)
            seen += [h.session.id for h in page]
            if len(page) < 3:
                break
            before = page[-1].doc_id
        assert seen == list(reversed(made))

        listed: list[str] = []
        cursor: tuple[float, str] | None = None
        for _ in made:
            page_, cursor = cp.sessions_page((), cursor, 2)
            listed += [s.id for s in page_]
            if cursor is None:
                break
        assert listed == list(reversed(made))  # newest updated first, each once
        idle, _ = cp.sessions_page((SessionState.IDLE,), None, 100)
        assert len(idle) == 7
        assert cp.sessions_page((SessionState.CLOSED,), None, 100) == ([], None)


def test_a_query_without_a_word_is_refused_and_operators_are_only_words() -> None:
    for nothing in ("", "   ", "!!", '""', "*"):
        with pytest.raises(SearchQueryError):
            SearchQuery.parse(nothing)
    # What FTS5 or to_tsquery would read as syntax is only words here.
    parsed = SearchQuery.parse('NEAR(a b) OR "c d" e* -f')
    # (A bare word with punctuation in it is the phrase of its words, as the index saw it.)
    assert parsed.fts5() == '"near a" "b" "or" "c d" "e"* "f"'
    assert parsed.pg_terms() == [
        ("phrase", "NEAR(a"),
        ("phrase", "b)"),
        ("phrase", "OR"),
        ("phrase", "c d"),
        ("query", "'e':*"),
        ("phrase", "-f"),
    ]


@pytest.mark.timeout(120)
def test_operator_like_queries_run_on_the_backend(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        sid = _run(cp, tmp_path, "near the or gate", noop=True)
        for text in ("NEAR(near gate)", "or", '"the or"', "gate:*", "g*", "'gate'", "gate & !x"):
            assert _found(cp, text) in ([sid], []), text
        assert _found(cp, "gate:*") == [sid]
        assert _found(cp, "'gate'") == [sid]
        # A file name is one word to PostgreSQL's parser and two to FTS5's: found on both.
        named = _run(cp, tmp_path, "see main.py and util.py", noop=True)
        assert _found(cp, "main.py") == [named]
        assert _found(cp, '"main.py and util.py"') == [named]
        assert _found(cp, "main.p*") == ([] if is_postgres(db) else [named])


@pytest.mark.timeout(180)
def test_a_store_from_before_the_index_is_indexed_when_it_is_opened(
    tmp_path: Path, db: str
) -> None:
    """The upgrade from 0011: a log written without the index (the store taken back to
    0011 by Alembic's downgrade, which drops it) is indexed by the migration."""
    with open_cp(tmp_path, db=db) as cp:
        sid = _run(cp, tmp_path, "migrate the ancient ledger", noop=True)
    _downgrade(db, "0011")
    assert query(db, "SELECT version_num FROM alembic_version") == [("0011",)]
    with Store.open(db) as store:
        hits = store.search(SearchQuery.parse("ancient ledger"), SearchFilters(), 10)
        assert [h.session.id for h in hits] == [sid]
        (answer,) = store.search(SearchQuery.parse("echo"), SearchFilters(), 9)
        assert answer.role == "agent"  # the agent's side of the old turn, indexed too
    roles = query(db, "SELECT role FROM search_docs ORDER BY seq")
    assert roles == [("user",), ("agent",)]


def _downgrade(db: str, revision: str) -> None:
    from alembic import command
    from sqlalchemy import create_engine

    from store.migrate import _config

    engine = create_engine(locate(db).sqlalchemy_url())
    try:
        with engine.begin() as conn:
            config = _config()
            config.attributes["connection"] = conn
            command.downgrade(config, revision)
    finally:
        engine.dispose()


@pytest.mark.timeout(120)
def test_the_cli_searches_with_filters_pages_and_refuses_bad_input(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from control_plane.cli import app

    db = str(tmp_path / "cp.db")
    with open_cp(tmp_path, db=db) as cp:
        sids = [_run(cp, tmp_path, f"quarterly report {i}", noop=True) for i in range(3)]

    def acpctl(*args: str) -> tuple[int, str]:
        done = CliRunner().invoke(app, ["--db", db, *args], env={"COLUMNS": "80"})
        return done.exit_code, done.output

    code, out = acpctl("search", "quarterly", "--limit", "2", "--json")
    assert code == 0, out
    page = json.loads(out)
    assert [h["sessionId"] for h in page["hits"]] == [sids[2], sids[1]]
    assert page["hits"][0]["snippet"].startswith("Echo: quarterly report 2")
    code, out = acpctl("search", "quarterly", "--before", str(page["nextCursor"]), "--json")
    rest = json.loads(out)
    assert [h["sessionId"] for h in rest["hits"]] == [sids[0]] and rest["nextCursor"] is None
    code, out = acpctl("search", "quarterly", "--state", "closed", "--json")
    assert json.loads(out) == {"hits": [], "nextCursor": None}
    code, out = acpctl("search", "report")
    assert code == 0 and all(sid in out for sid in sids)  # whole ids, in any width
    for bad, says in (
        (["!!"], "nothing to search for"),
        (["x", "--state", "bogus"], "no session state bogus"),
        (["x", "--since", "yesterday"], "neither a duration"),
    ):
        code, out = acpctl("search", *bad)
        assert code == 2 and says in out, out


def test_alembic_upgrade_from_empty_to_head_builds_the_index(tmp_path: Path) -> None:
    target = tmp_path / "fresh.db"
    alembic_upgrade(str(target), "head")
    names = {r[0] for r in query(str(target), "SELECT name FROM sqlite_master")}
    assert {"search_docs", "search_fts", "search_docs_ai", "search_docs_ad"} <= names
