"""Scrub agent environment values: a session keeps the names of its agent's variables, never
their values (API keys were stored in clear in ``sessions.agent`` and in each
``session_created`` event's payload, and so reached exports and ``events --json``).

``secure_delete`` is on for the rewrite so the old bytes do not linger in freed pages; the
store checkpoints the WAL after migrating (``store.migrate``) so they do not linger there.
Spawn request hashes stay as they were: ``store.ops.sessions.spawn`` also accepts the digest
these releases computed, so an idempotent re-spawn after the upgrade still matches.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import json
from typing import Any

from alembic import op
from sqlalchemy import text

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _scrubbed(agent: Any) -> Any:
    if not isinstance(agent, dict) or "env" not in agent:
        return None
    env = agent.pop("env") or {}
    names = set(agent.get("envNames") or ()) | set(env if isinstance(env, dict) else ())
    agent["envNames"] = sorted(str(n) for n in names)
    return agent


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("PRAGMA secure_delete = ON")
    for row in conn.execute(text("SELECT id, agent FROM sessions")).all():
        agent = _scrubbed(json.loads(row.agent))
        if agent is not None:
            conn.execute(
                text("UPDATE sessions SET agent = :agent WHERE id = :id"),
                {"agent": json.dumps(agent, sort_keys=True, separators=(",", ":")), "id": row.id},
            )
    created = conn.execute(
        text("SELECT id, payload FROM events WHERE kind = 'session_created'")
    ).all()
    for row in created:
        payload = json.loads(row.payload)
        if isinstance(payload, dict) and _scrubbed(payload.get("agent")) is not None:
            conn.execute(
                text("UPDATE events SET payload = :payload WHERE id = :id"),
                {"payload": json.dumps(payload, separators=(",", ":")), "id": row.id},
            )


def downgrade() -> None:
    """Values cannot come back: they were never meant to be stored."""
