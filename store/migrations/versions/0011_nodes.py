"""Control-plane nodes and their leases; where each session may run.

A node is one control-plane process (``id`` is its owner id, host:pid:start): it renews
``lease_until`` while it lives; once that has passed, its sessions are taken over by other
nodes (a higher fencing epoch refuses the old owner's writes). ``name`` is the stable name
placement refers to (default: the host name) and ``labels`` what it offers (for example a
shared volume). ``sessions.placement``: null (any node), or a JSON object ``{"node": name}``
or ``{"labels": [...]}``.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "nodes",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("host", sa.String(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.Column("capacity", sa.Integer(), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("heartbeat_at", sa.Float(), nullable=False),
        sa.Column("lease_until", sa.Float(), nullable=False),
        sa.Column("stopped_at", sa.Float(), nullable=True),
    )
    op.create_index("ix_nodes_name", "nodes", ["name"])
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("placement", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("placement")
    op.drop_index("ix_nodes_name", table_name="nodes")
    op.drop_table("nodes")
