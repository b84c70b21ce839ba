"""Command priority: a steered prompt runs before prompts queued earlier.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("commands") as batch:
        batch.add_column(sa.Column("priority", sa.Integer(), nullable=False, server_default="0"))
    op.drop_index("ix_commands_session_state_seq", table_name="commands")
    op.create_index(
        "ix_commands_session_state_priority_seq",
        "commands",
        ["session_id", "state", "priority", "seq"],
    )


def downgrade() -> None:
    op.drop_index("ix_commands_session_state_priority_seq", table_name="commands")
    op.create_index("ix_commands_session_state_seq", "commands", ["session_id", "state", "seq"])
    with op.batch_alter_table("commands") as batch:
        batch.drop_column("priority")
