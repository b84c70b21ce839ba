"""The store's identity: a random id minted once, when the store is created (or upgraded).

Event ids restart at 1 in a new store. A sink that outlives its store (a JSONL file kept when
the database was deleted and created again) would take the new store's events for ones it
already has; with the identity on every line it tells the two apart.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import time
import uuid

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "store_identity",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.bulk_insert(table, [{"id": uuid.uuid4().hex, "created_at": time.time()}])


def downgrade() -> None:
    op.drop_table("store_identity")
