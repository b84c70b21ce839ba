"""Events by command: a turn's events are read by (session, command) at the end of every
turn (the final text) and by ``acpctl serve`` while it streams; without this index that read
scans the whole session's log, and grows with it.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_events_session_command", "events", ["session_id", "command_id"])


def downgrade() -> None:
    op.drop_index("ix_events_session_command", table_name="events")
