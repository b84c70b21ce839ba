"""Drop ``ix_events_session_command`` (0003): nothing reads a turn's events by command on a hot
path any more. The final text comes from the recorder in memory and ``acpctl serve`` streams
from the session feeds; the remaining reader (a repeated ``session/prompt`` in serve) walks
the session's log through the (session_id, seq) key. The index cost every appended event
~2 µs of the writer thread's CPU (a sixth of an event's insert).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_events_session_command", table_name="events")


def downgrade() -> None:
    op.create_index("ix_events_session_command", "events", ["session_id", "command_id"])
