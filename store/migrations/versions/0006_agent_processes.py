"""Agent process trees and cached agent capabilities.

``sessions.agent_process``: the live agent's reaper (pid + start time), its process group, the
host and boot id, so recovery kills a dead owner's leftover agent tree before it restores the
session. ``agent_capabilities``: each agent command's ``initialize`` answer, so ``acpctl serve``
answers ``initialize`` without starting an agent.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("agent_process", sa.Text(), nullable=True))
    op.create_table(
        "agent_capabilities",
        sa.Column("command_hash", sa.String(), primary_key=True),
        sa.Column("initialize", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("agent_capabilities")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("agent_process")
