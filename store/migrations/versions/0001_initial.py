"""Initial schema: sessions, bindings, commands, events, delivery_checkpoints.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("spawn_key", sa.String(), nullable=True, unique=True),
        sa.Column("request_hash", sa.String(), nullable=False),
        sa.Column("parent_id", sa.String(), sa.ForeignKey("sessions.id"), nullable=True),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("cwd", sa.Text(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("queue_mode", sa.String(), nullable=False),
        sa.Column("acp_session_id", sa.String(), nullable=True),
        sa.Column("owner", sa.String(), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("last_event_seq", sa.Integer(), nullable=False),
        sa.Column("last_command_seq", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("closed_at", sa.Float(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("metadata", sa.Text(), nullable=False),
    )
    op.create_index("ix_sessions_state", "sessions", ["state"])
    op.create_index("ix_sessions_parent", "sessions", ["parent_id"])
    op.create_table(
        "bindings",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("session_id", sa.String(), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("sink_kind", sa.String(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("bound_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
    )
    op.create_index("ix_bindings_session_active", "bindings", ["session_id", "active"])
    op.create_table(
        "commands",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("session_id", sa.String(), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.String(), nullable=True),
        sa.Column("request_hash", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("session_id", "seq", name="uq_commands_session_seq"),
        sa.UniqueConstraint("session_id", "idempotency_key", name="uq_commands_session_key"),
    )
    op.create_index("ix_commands_session_state_seq", "commands", ["session_id", "state", "seq"])
    op.create_index("ix_commands_state", "commands", ["state"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("command_id", sa.String(), sa.ForeignKey("commands.id"), nullable=True),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("session_id", "seq", name="uq_events_session_seq"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "delivery_checkpoints",
        sa.Column("binding_id", sa.String(), sa.ForeignKey("bindings.id"), primary_key=True),
        sa.Column("last_event_seq", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    for table in ("delivery_checkpoints", "events", "commands", "bindings", "sessions"):
        op.drop_table(table)
