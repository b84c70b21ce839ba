"""Access tokens of the network front end (``acpctl serve --listen``): stored hashed.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("secret_sha256", sa.String(), nullable=False, unique=True),
        sa.Column("access", sa.String(), nullable=False),
        sa.Column("sessions", sa.String(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("revoked_at", sa.Float(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("api_tokens")
