"""Webhook checkpoints: per ``[[notify]]`` hook, the last event of the store-wide log it
accepted and the process delivering it (docs/notify.md).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notify_checkpoints",
        sa.Column("hook", sa.String(), primary_key=True),
        sa.Column("last_event_id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("notify_checkpoints")
