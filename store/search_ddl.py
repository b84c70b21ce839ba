"""The full-text index of ``search_docs``, which each backend builds its own way (the rest
of the schema is ``store.schema``). Run by ``create_head_schema`` for a new store and by
migration 0012 for an older one, so both hold the same objects.

- SQLite: an FTS5 table over ``search_docs.body`` with external content (the text is stored
  once, in ``search_docs``), kept in step by triggers: an insert or delete of a document
  changes the index in the same transaction, whoever writes it. Tokenizer ``unicode61``
  with diacritics removed: words, case- and accent-insensitive, no stemming.
- PostgreSQL: a stored generated column ``tsv = to_tsvector('simple', body)`` with a GIN
  index: the same language-neutral words (no stemming, no stop words), so a query finds the
  same documents on both. Stored, not an expression index: ANALYZE then keeps statistics of
  its words, and the planner reads a rare word from the GIN index and a common one in
  document order (measured: an expression index made it read the whole table, computing
  ``to_tsvector`` row by row, for a rare word: seconds instead of milliseconds).
"""

from __future__ import annotations

from sqlalchemy import Connection, text

FTS_TABLE = "search_fts"
# The configuration every query must name too, or PostgreSQL will not use the index.
PG_TEXT_CONFIG = "simple"

SQLITE_DDL = (
    f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5("
    "body, content='search_docs', content_rowid='id', "
    "tokenize='unicode61 remove_diacritics 2')",
    "CREATE TRIGGER search_docs_ai AFTER INSERT ON search_docs BEGIN "
    f"INSERT INTO {FTS_TABLE}(rowid, body) VALUES (new.id, new.body); END",
    "CREATE TRIGGER search_docs_ad AFTER DELETE ON search_docs BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, body) VALUES ('delete', old.id, old.body); END",
    "CREATE TRIGGER search_docs_au AFTER UPDATE ON search_docs BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, body) VALUES ('delete', old.id, old.body); "
    f"INSERT INTO {FTS_TABLE}(rowid, body) VALUES (new.id, new.body); END",
)
PG_VECTOR = "tsv"
POSTGRES_DDL = (
    f"ALTER TABLE search_docs ADD COLUMN {PG_VECTOR} tsvector "
    f"GENERATED ALWAYS AS (to_tsvector('{PG_TEXT_CONFIG}', body)) STORED",
    f"CREATE INDEX ix_search_docs_tsv ON search_docs USING gin ({PG_VECTOR})",
)
SQLITE_DROP = (
    "DROP TRIGGER search_docs_au",
    "DROP TRIGGER search_docs_ad",
    "DROP TRIGGER search_docs_ai",
    f"DROP TABLE {FTS_TABLE}",
)
POSTGRES_DROP = (
    "DROP INDEX ix_search_docs_tsv",
    f"ALTER TABLE search_docs DROP COLUMN {PG_VECTOR}",
)


def in_schema_module(name: str | None, type_: str, parent_names: object = None) -> bool:
    """Alembic's ``include_name`` hook: False for the objects made here (the FTS5 table and
    its shadow tables; the ``tsv`` column and its GIN index), which ``store.schema`` does
    not describe and which autogenerate must therefore neither drop nor compare."""
    if name is None:
        return True
    if type_ == "column":
        return name != PG_VECTOR
    return not (name.startswith(FTS_TABLE) or name == "ix_search_docs_tsv")


def create_search_index(conn: Connection) -> None:
    """Make the backend's full-text index of ``search_docs`` (which must exist, empty or
    not: on SQLite the FTS5 table is filled from it by ``rebuild``)."""
    if conn.dialect.name == "postgresql":
        for statement in POSTGRES_DDL:
            conn.execute(text(statement))
        return
    for statement in SQLITE_DDL:
        conn.execute(text(statement))
    conn.execute(text(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')"))


def drop_search_index(conn: Connection) -> None:
    for statement in POSTGRES_DROP if conn.dialect.name == "postgresql" else SQLITE_DROP:
        conn.execute(text(statement))
