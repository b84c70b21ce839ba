"""Refuse a file that is not a healthy SQLite database before anything writes to it.

Opening a store sets WAL mode and runs migrations, both of which write. A file that is not
SQLite, or whose pages are corrupt, must produce a clear ``StoreError`` and stay byte for byte
as it was, so the checks here use a read-only connection and run before any of that.
"""

from __future__ import annotations

import os
import sqlite3
from enum import StrEnum

from state_machines.errors import StoreError

SQLITE_MAGIC = b"SQLite format 3\x00"


class IntegrityCheck(StrEnum):
    QUICK = "quick"  # PRAGMA quick_check: every page read once; O(size of the file)
    HEADER = "header"  # magic bytes and schema readable only; O(1)


def check_database_file(path: str, level: IntegrityCheck) -> None:
    """Raise ``StoreError`` if ``path`` exists and is not a usable SQLite database."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return  # a new store; nothing to protect
    with open(path, "rb") as fh:
        magic = fh.read(len(SQLITE_MAGIC))
    if magic != SQLITE_MAGIC:
        raise StoreError(
            f"{path} is not an SQLite database (unexpected file header); "
            "point --db at a store file or a new path",
            path=path,
        )
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {path} read-only: {exc}", path=path) from exc
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if level is IntegrityCheck.QUICK:
            rows = conn.execute("PRAGMA quick_check(5)").fetchall()
            problems = [r[0] for r in rows if r[0] != "ok"]
            if problems:
                raise StoreError(
                    f"{path} is corrupt ({'; '.join(problems)}); restore it from a backup "
                    "(the file was left untouched)",
                    path=path,
                )
    except sqlite3.DatabaseError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            return  # another process is writing; the open path retries on locks
        raise StoreError(
            f"{path} is corrupt or not a database ({exc}); the file was left untouched",
            path=path,
        ) from exc
    finally:
        conn.close()
