"""Full-text search over what was said in sessions (``search_docs``; the index per backend
in ``store/search_ddl.py``). Newest match first: both indexes hand their matches back in
document order, so a page costs the rows it shows, not every match of a common word."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    column,
    func,
    literal_column,
    select,
    table,
    text,
)

from state_machines import SessionState
from store.records import SessionRecord, utc
from store.rows import session_from_mapping
from store.schema import search_docs, sessions
from store.search_ddl import FTS_TABLE, PG_TEXT_CONFIG, PG_VECTOR
from store.search_query import SearchQuery

SNIPPET_CHARS = 160
_fts = table(FTS_TABLE, column("rowid"))


@dataclass(frozen=True)
class SearchHit:
    """A session that matched, by its newest matching document."""

    session: SessionRecord
    doc_id: int  # the cursor of the next page: ``before`` = the last hit's
    command_id: str | None
    seq: int  # the seq of the event the document was written with
    role: str  # user (a prompt) or agent (a turn's answer)
    at: datetime
    snippet: str


@dataclass(frozen=True)
class SearchFilters:
    agent: str | None = None  # the agent's name, or the first word of its command
    states: tuple[SessionState, ...] = ()
    since: float | None = None  # documents written at or after (unix seconds)
    before: int | None = None  # only documents older than this one (the next page)


def search(
    conn: Connection, query: SearchQuery, filters: SearchFilters, limit: int
) -> list[SearchHit]:
    """Up to ``limit`` sessions whose documents match, newest match first."""
    hits: list[SearchHit] = []
    seen: set[str] = set()
    # Documents come newest first; a few per session, so a batch of four per hit wanted.
    for row in _matches(conn, query, filters, batch=max(4 * limit, 40)):
        if row.session_id in seen:
            continue
        seen.add(row.session_id)
        session = session_from_mapping(row._mapping)
        if filters.agent is not None and not _agent_is(session, filters.agent):
            continue
        if filters.before is not None and _matched_since(conn, query, session.id, filters.before):
            continue  # its newest match is at or after the cursor: an earlier page showed it
        hits.append(
            SearchHit(
                session,
                int(row.doc_id),
                row.doc_command_id,
                int(row.doc_seq),
                str(row.doc_role),
                utc(float(row.doc_created_at)),
                snippet(str(row.doc_body), query),
            )
        )
        if len(hits) >= limit:
            break
    return hits


def _matches(
    conn: Connection, query: SearchQuery, filters: SearchFilters, batch: int
) -> Iterator[Any]:
    stmt = select(
        search_docs.c.id.label("doc_id"),
        search_docs.c.session_id,
        search_docs.c.command_id.label("doc_command_id"),
        search_docs.c.seq.label("doc_seq"),
        search_docs.c.role.label("doc_role"),
        search_docs.c.created_at.label("doc_created_at"),
        search_docs.c.body.label("doc_body"),
        *sessions.c,
    ).join(sessions, sessions.c.id == search_docs.c.session_id)
    if filters.states:
        stmt = stmt.where(sessions.c.state.in_([s.value for s in filters.states]))
    if filters.since is not None:
        stmt = stmt.where(search_docs.c.created_at >= filters.since)
    if conn.dialect.name == "postgresql":
        yield from _pg_matches(conn, stmt, query, filters.before, batch)
        return
    if filters.before is not None:
        stmt = stmt.where(search_docs.c.id < filters.before)
    # SQLite steps the statement as rows are read: closing it stops the scan where the
    # page ended, whatever the number of matches.
    result = conn.execution_options(stream_results=True).execute(_sqlite(stmt, query))
    try:
        yield from result
    finally:
        result.close()


# Up to this many matches, PostgreSQL reads them all from the GIN index and sorts them; past
# it, the word is common enough that reading documents newest first finds a page soon.
PG_FEW_MATCHES = 2000


def _pg_matches(
    conn: Connection, stmt: Select[Any], query: SearchQuery, before: int | None, batch: int
) -> Iterator[Any]:
    """PostgreSQL's plan chosen here, not by the planner: with ORDER BY id and a LIMIT it
    reads documents newest first and tests each (fast for a common word, the whole table for
    a rare one), since its estimate for a word missing from the statistics is a guess. So:
    a word the planner expects in more than ``PG_FEW_MATCHES`` documents (then it is in the
    statistics and the estimate is close) is read newest first; else the matching ids come
    from the GIN index alone (a bitmap scan, index scans switched off for this statement), at
    most ``PG_FEW_MATCHES`` + 1 of them; when that is all of them, their rows by id, newest
    first; else newest first after all."""
    matching = stmt.with_only_columns(search_docs.c.id).order_by(None)
    if before is not None:
        matching = matching.where(search_docs.c.id < before)
    if _estimated_rows(conn, _postgres(matching, query).order_by(None)) > PG_FEW_MATCHES:
        # A common word (it is in the statistics, so the estimate is close): building its
        # bitmap alone would cost more than finding a page newest first.
        yield from _pg_newest_first(conn, _postgres(stmt, query), before, batch)
        return
    conn.execute(text("SET LOCAL enable_indexscan = off"))
    conn.execute(text("SET LOCAL enable_seqscan = off"))
    try:
        ids = list(
            conn.execute(
                _postgres(matching, query).order_by(None).limit(PG_FEW_MATCHES + 1)
            ).scalars()
        )
    finally:
        conn.execute(text("RESET enable_indexscan"))
        conn.execute(text("RESET enable_seqscan"))
    if len(ids) <= PG_FEW_MATCHES:
        ids.sort(reverse=True)
        for start in range(0, len(ids), batch):
            chunk = ids[start : start + batch]
            by_id = stmt.where(search_docs.c.id.in_(chunk)).order_by(search_docs.c.id.desc())
            yield from conn.execute(by_id).all()
        return
    yield from _pg_newest_first(conn, _postgres(stmt, query), before, batch)


def _pg_newest_first(
    conn: Connection, ordered: Select[Any], before: int | None, batch: int
) -> Iterator[Any]:
    """Matches newest first, in LIMITed batches (not a server-side cursor, which the planner
    would plan for its first rows alone)."""
    while True:
        bounded = ordered if before is None else ordered.where(search_docs.c.id < before)
        rows = conn.execute(bounded.limit(batch)).all()
        yield from rows
        if len(rows) < batch:
            return
        before = int(rows[-1].doc_id)


def _estimated_rows(conn: Connection, stmt: Select[Any]) -> float:
    """The planner's estimate of the rows ``stmt`` returns (one EXPLAIN, no execution):
    close for a word in the column's statistics, a small guess for a rare one."""
    # IN lists rendered into the text: EXPLAIN goes to the driver as it is.
    compiled = stmt.compile(conn, compile_kwargs={"render_postcompile": True})
    plan = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {compiled}", compiled.params).scalar()
    document = plan if isinstance(plan, list) else json.loads(str(plan))
    return float(document[0]["Plan"]["Plan Rows"])


def _matched_since(conn: Connection, query: SearchQuery, session_id: str, doc_id: int) -> bool:
    """Whether the session has a matching document at or after ``doc_id``: pages list
    sessions by their newest match, so such a session was on an earlier page. Looks at the
    session's own few documents (``ix_search_docs_session``), each matched by its id: a
    MATCH over the whole index would read every match of a common word."""
    own = list(
        conn.execute(
            select(search_docs.c.id).where(
                search_docs.c.session_id == session_id, search_docs.c.id >= doc_id
            )
        ).scalars()
    )
    if not own:
        return False
    if conn.dialect.name == "postgresql":
        stmt = _postgres(select(search_docs.c.id).where(search_docs.c.id.in_(own)), query)
        return conn.execute(stmt.limit(1)).first() is not None
    one = text(f"SELECT 1 FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH :match AND rowid = :id")
    match = query.fts5()
    return any(conn.execute(one, {"match": match, "id": i}).first() is not None for i in own)


def _sqlite(stmt: Select[Any], query: SearchQuery) -> Select[Any]:
    return (
        stmt.join(_fts, _fts.c.rowid == search_docs.c.id)
        .where(text(f"{FTS_TABLE} MATCH :match").bindparams(match=query.fts5()))
        .order_by(_fts.c.rowid.desc())
    )


def _postgres(stmt: Select[Any], query: SearchQuery) -> Select[Any]:
    # The configuration is the one ``tsv`` was computed with (store/search_ddl.py).
    config: ColumnElement[str] = literal_column(f"'{PG_TEXT_CONFIG}'")
    vector: ColumnElement[Any] = literal_column(f"search_docs.{PG_VECTOR}")
    parts: list[ColumnElement[Any]] = [
        func.phraseto_tsquery(config, term) if kind == "phrase" else func.to_tsquery(config, term)
        for kind, term in query.pg_terms()
    ]
    combined = functools.reduce(lambda a, b: a.op("&&")(b), parts)
    return stmt.where(vector.op("@@")(combined)).order_by(search_docs.c.id.desc())


def _agent_is(session: SessionRecord, agent: str) -> bool:
    command = session.agent.command
    first = command[0].rsplit("/", 1)[-1] if command else ""
    return agent in (session.agent.name, first)


def snippet(body: str, query: SearchQuery, width: int = SNIPPET_CHARS) -> str:
    """The part of ``body`` around its first match, on one line."""
    flat = " ".join(body.split())
    found = _first_match(flat.lower(), query.words)
    start = 0 if found is None else max(0, found - width // 3)
    piece = flat[start : start + width]
    return ("…" if start else "") + piece + ("…" if start + width < len(flat) else "")


def _first_match(lowered: str, words: tuple[str, ...]) -> int | None:
    positions = [m.start() for w in words if (m := re.search(re.escape(w), lowered))]
    return min(positions) if positions else None
