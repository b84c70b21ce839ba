"""What a store holds, read past the store's own code, on either backend: every stored byte
(where a secret must never be), and whether anything was written at all."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.direct_sql import is_postgres, query


def stored_bytes(db: str | os.PathLike[str]) -> bytes:
    """A SQLite store: its file with the ``-wal`` and ``-shm`` files beside it, byte for
    byte as on disk (free pages and the log included). A PostgreSQL store: every value of
    every row of every table in its schema, as text."""
    db = os.fspath(db)
    if not is_postgres(db):
        path = Path(db)
        return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*") if p.is_file())
    tables = query(
        db,
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename",
    )
    chunks: list[bytes] = []
    for (table,) in tables:
        for row in query(db, f'SELECT * FROM "{table}"'):
            chunks += [v if isinstance(v, bytes) else str(v).encode() for v in row]
    return b"\n".join(chunks)


def nothing_stored(db: str | os.PathLike[str]) -> bool:
    """Whether no session, command or event was ever written: a SQLite store file that was
    never created; a PostgreSQL database (created by its administrator) whose tables hold
    none."""
    db = os.fspath(db)
    if not is_postgres(db):
        return not Path(db).exists()
    tables = ("sessions", "commands", "events")
    return all(query(db, f"SELECT count(*) FROM {table}") == [(0,)] for table in tables)
