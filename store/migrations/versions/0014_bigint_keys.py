"""64-bit keys and counters: every integer that only grows (the store-wide event id and its
sequence, the per-session event and command sequence numbers, the checkpoints that hold
them, a session's token sums) becomes ``bigint`` on PostgreSQL, where ``integer`` is 32-bit
and the first value past 2^31 - 1 would fail the write that made it.

On SQLite this revision changes nothing: an INTEGER column holds 64-bit values already, and
``events.id`` (``INTEGER PRIMARY KEY AUTOINCREMENT``) is the 64-bit rowid. The schema module
spells these columns ``BigInteger`` with SQLite's ``Integer`` variant, so the SQLite schema
text is the same before and after.

On PostgreSQL each table is altered in one ``ALTER TABLE`` (one rewrite of the table, its
indexes rebuilt), under an ACCESS EXCLUSIVE lock for its duration: on a large ``events``
table that is a rewrite of the whole log (measure it on a copy first; docs/scaling.md).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# Table -> its columns that become 64-bit (PostgreSQL only).
WIDENED: dict[str, tuple[str, ...]] = {
    "sessions": ("last_event_seq", "last_command_seq"),
    "commands": ("seq",),
    "events": ("id", "seq"),
    "delivery_checkpoints": ("last_event_seq",),
    "session_usage": ("input_tokens", "output_tokens", "total_tokens"),
    "notify_checkpoints": ("last_event_id",),
    "search_docs": ("seq",),
}
# Sequences behind the serial keys that grow with them (search_docs.id was 64-bit from 0012).
_SEQUENCES = (("events", "id"),)


def _alter(to: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return  # SQLite: 64-bit already (see the module docstring)
    for table, columns in WIDENED.items():
        changes = ", ".join(f"ALTER COLUMN {c} TYPE {to}" for c in columns)
        op.execute(f"ALTER TABLE {table} {changes}")
    for table, column in _SEQUENCES:
        # The sequence's own type bounds it too (a serial's is integer); its maximum moves
        # with the type because it was the old type's maximum.
        op.execute(f"ALTER SEQUENCE {table}_{column}_seq AS {to}")


def upgrade() -> None:
    _alter("bigint")


def downgrade() -> None:
    # Fails, changing nothing, if a value no longer fits in 32 bits.
    _alter("integer")
