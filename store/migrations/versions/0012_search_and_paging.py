"""Search and paging: ``search_docs`` with the backend's full-text index
(``store/search_ddl.py``), filled from the prompts and turns already in the log; indexes
on ``sessions`` for cursor paging by update and creation time (the state's index becomes
the prefix of one of them); ``permission_requests`` by session, for retention.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.search_backfill import backfill_search_docs
from store.search_ddl import create_search_index, drop_search_index

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_sessions_state", table_name="sessions")
    op.create_index("ix_sessions_state_updated", "sessions", ["state", "updated_at", "id"])
    op.create_index("ix_sessions_updated", "sessions", ["updated_at", "id"])
    op.create_index("ix_sessions_created", "sessions", ["created_at", "id"])
    op.create_index("ix_permission_requests_session", "permission_requests", ["session_id"])
    op.create_table(
        "search_docs",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("session_id", sa.String(), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("command_id", sa.String(), nullable=True),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
    )
    op.create_index("ix_search_docs_session", "search_docs", ["session_id", "command_id"])
    conn = op.get_bind()
    backfill_search_docs(conn)
    create_search_index(conn)


def downgrade() -> None:
    conn = op.get_bind()
    drop_search_index(conn)
    op.drop_index("ix_search_docs_session", table_name="search_docs")
    op.drop_table("search_docs")
    op.drop_index("ix_permission_requests_session", table_name="permission_requests")
    op.drop_index("ix_sessions_created", table_name="sessions")
    op.drop_index("ix_sessions_updated", table_name="sessions")
    op.drop_index("ix_sessions_state_updated", table_name="sessions")
    op.create_index("ix_sessions_state", "sessions", ["state"])
