"""The store's tables (SQLAlchemy Core). A new, empty database is created from this metadata
directly (store/migrate.py); a store written by an older release is brought to the same schema
by the Alembic migrations in ``store/migrations``. tests/integration/test_fresh_store.py checks
that the two agree exactly, column order included: a column a migration adds to an existing
table goes last in that table here, where ``ALTER TABLE ... ADD COLUMN`` puts it.

Timestamps are REAL unix seconds (cheap to compare and index); JSON columns are TEXT holding
JSON documents, so raw agent payloads are kept byte for byte.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

# Every key or counter that only grows (the store-wide event id, per-session sequence
# numbers, checkpoints that hold them, token sums): 64-bit on PostgreSQL (0014), where a
# plain ``Integer`` is 32-bit and would overflow at 2^31. SQLite's INTEGER is 64-bit already
# (and ``INTEGER PRIMARY KEY`` is the rowid only if spelled exactly so): the variant keeps it.
BIG = BigInteger().with_variant(Integer, "sqlite")

sessions = Table(
    "sessions",
    metadata,
    Column("id", String, primary_key=True),
    # Caller-supplied spawn key, unique per store; request_hash detects a reuse with other input.
    Column("spawn_key", String, nullable=True, unique=True),
    Column("request_hash", String, nullable=False),
    Column("parent_id", String, ForeignKey("sessions.id"), nullable=True),
    Column("depth", Integer, nullable=False, default=0),
    Column("agent", Text, nullable=False),
    Column("cwd", Text, nullable=False),
    Column("state", String, nullable=False),
    Column("queue_mode", String, nullable=False, default="followup"),
    Column("acp_session_id", String, nullable=True),
    Column("owner", String, nullable=True),
    Column("epoch", Integer, nullable=False, default=0),
    # Counters kept on the row so a new seq needs no MAX() scan.
    Column("last_event_seq", BIG, nullable=False, default=0),
    Column("last_command_seq", BIG, nullable=False, default=0),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("closed_at", Float, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("metadata", Text, nullable=False, default="{}"),
    # The live agent's process tree as JSON (host, boot id, reaper pid + start time, process
    # group), so recovery can kill what a dead owner left running (migration 0006).
    Column("agent_process", Text, nullable=True),
    # Where the session may run (0011): null for any node, else {"node": name} or
    # {"labels": [...]} (store/placement.py).
    Column("placement", Text, nullable=True),
)
Index("ix_sessions_parent", sessions.c.parent_id)
# Cursor paging (0012): the console lists newest-updated first (of one state or any),
# ``list_sessions`` oldest created first; retention looks for trees not updated since a
# cutoff. The state's index (the sweeps' "which are running") is the prefix of the first.
Index("ix_sessions_state_updated", sessions.c.state, sessions.c.updated_at, sessions.c.id)
Index("ix_sessions_updated", sessions.c.updated_at, sessions.c.id)
Index("ix_sessions_created", sessions.c.created_at, sessions.c.id)

bindings = Table(
    "bindings",
    metadata,
    Column("id", String, primary_key=True),
    Column("session_id", String, ForeignKey("sessions.id"), nullable=False),
    Column("sink_kind", String, nullable=False),
    Column("target", Text, nullable=False),
    Column("active", Boolean, nullable=False, default=True),
    Column("bound_at", Float, nullable=False),
    Column("expires_at", Float, nullable=True),
)
Index("ix_bindings_session_active", bindings.c.session_id, bindings.c.active)

commands = Table(
    "commands",
    metadata,
    Column("id", String, primary_key=True),
    Column("session_id", String, ForeignKey("sessions.id"), nullable=False),
    Column("seq", BIG, nullable=False),
    Column("kind", String, nullable=False),
    Column("payload", Text, nullable=False),
    Column("idempotency_key", String, nullable=True),
    Column("request_hash", String, nullable=False),
    Column("state", String, nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("max_attempts", Integer, nullable=False),
    Column("result", Text, nullable=True),
    Column("error", Text, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float, nullable=True),
    Column("finished_at", Float, nullable=True),
    Column("updated_at", Float, nullable=False),
    # Claimed highest first, then by seq: a steered prompt jumps the queue (migration 0002).
    Column("priority", Integer, nullable=False, default=0, server_default="0"),
    UniqueConstraint("session_id", "seq", name="uq_commands_session_seq"),
    UniqueConstraint("session_id", "idempotency_key", name="uq_commands_session_key"),
)
# claim_next: the next queued command of one session; recover: every running command.
Index(
    "ix_commands_session_state_priority_seq",
    commands.c.session_id,
    commands.c.state,
    commands.c.priority,
    commands.c.seq,
)
Index("ix_commands_state", commands.c.state)

events = Table(
    "events",
    metadata,
    Column("id", BIG, primary_key=True, autoincrement=True),
    Column("session_id", String, ForeignKey("sessions.id"), nullable=False),
    Column("seq", BIG, nullable=False),
    Column("command_id", String, ForeignKey("commands.id"), nullable=True),
    Column("kind", String, nullable=False),
    Column("payload", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    UniqueConstraint("session_id", "seq", name="uq_events_session_seq"),
    # AUTOINCREMENT: global event ids are never reused, even after retention deletes rows,
    # because sinks dedupe by them.
    sqlite_autoincrement=True,
)

delivery_checkpoints = Table(
    "delivery_checkpoints",
    metadata,
    Column("binding_id", String, ForeignKey("bindings.id"), primary_key=True),
    Column("last_event_seq", BIG, nullable=False, default=0),
    Column("updated_at", Float, nullable=False),
)

# What each agent command answered to ``initialize`` (capabilities, auth methods, info), so
# ``acpctl serve`` answers its client's ``initialize`` without starting an agent (0006).
agent_capabilities = Table(
    "agent_capabilities",
    metadata,
    Column("command_hash", String, primary_key=True),
    Column("initialize", Text, nullable=False),
    Column("updated_at", Float, nullable=False),
)

# One row: the random id minted when the store was created (0007). Sinks key the events they
# hold by it, so a store deleted and created again never collides with an old sink's ids.
store_identity = Table(
    "store_identity",
    metadata,
    Column("id", String, primary_key=True),
    Column("created_at", Float, nullable=False),
)

# What each session's agent reported it used, and the budget that stopped it (0008). A row
# appears with the first usage or stop; a session without one has used nothing.
session_usage = Table(
    "session_usage",
    metadata,
    Column("session_id", String, ForeignKey("sessions.id"), primary_key=True),
    Column("input_tokens", BIG, nullable=False, default=0),
    Column("output_tokens", BIG, nullable=False, default=0),
    Column("total_tokens", BIG, nullable=False, default=0),
    Column("cost_usd", Float, nullable=False, default=0.0),  # the highest the agent reported
    Column("priced_usd", Float, nullable=False, default=0.0),  # tokens x the price table
    Column("stopped_by", Text, nullable=True),  # JSON {budget, limit, used}
    Column("updated_at", Float, nullable=False),
)

# Who may use the network front end (0009). Only a SHA-256 of each token's secret is kept:
# the secret is random (256 bits), shown once at creation, and never stored.
api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", String, primary_key=True),
    Column("name", String, nullable=False),
    Column("secret_sha256", String, nullable=False, unique=True),
    Column("access", String, nullable=False),  # TokenAccess
    Column("sessions", String, nullable=False),  # TokenSessions
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float, nullable=True),
)

# Permission requests put to network clients (0010). ``state``: pending, then answered (by
# the first valid answer: ``decided_by`` names its token) or withdrawn (the turn was
# cancelled, the wait timed out, or the server stopped). The first answer wins by a
# compare-and-set on ``state``, so two clients answering at once cannot both win.
permission_requests = Table(
    "permission_requests",
    metadata,
    Column("id", String, primary_key=True),
    Column("session_id", String, ForeignKey("sessions.id"), nullable=False),
    Column("tool_call_id", String, nullable=True),
    Column("state", String, nullable=False),
    Column("option_id", String, nullable=True),  # None with state answered: "cancelled"
    Column("decided_by", String, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("decided_at", Float, nullable=True),
)
# A session's requests, for retention's deletion (0012).
Index("ix_permission_requests_session", permission_requests.c.session_id)

# Webhook checkpoints (0013): per configured ``[[notify]]`` hook (``hook``: its name, or a
# digest of its URL, never the URL), the id of the last event in the store-wide log it
# accepted, and the process delivering it (``owner``, judged live as session owners are:
# node leases, ``/proc``). One row per hook, not per session: a hook applies to every
# session, those spawned before it was configured too (docs/notify.md).
notify_checkpoints = Table(
    "notify_checkpoints",
    metadata,
    Column("hook", String, primary_key=True),
    Column("last_event_id", BIG, nullable=False),
    Column("owner", String, nullable=True),
    Column("updated_at", Float, nullable=False),
)

# Control-plane nodes (0011): one row per process, renewing its lease while it lives. Times
# are the database's clock (store/ops/nodes.py), so the machines' clocks need not agree.
nodes = Table(
    "nodes",
    metadata,
    Column("id", String, primary_key=True),  # the owner id sessions record (host:pid:start)
    Column("name", String, nullable=False),  # what placement names (default: the host)
    Column("host", String, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("labels", Text, nullable=False),  # JSON list of strings
    Column("capacity", Integer, nullable=False),  # turns it runs at once (max_running_turns)
    Column("running", Integer, nullable=False),  # turns running at its last heartbeat
    Column("started_at", Float, nullable=False),
    Column("heartbeat_at", Float, nullable=False),
    Column("lease_until", Float, nullable=False),
    Column("stopped_at", Float, nullable=True),  # an orderly stop: dead at once
)
Index("ix_nodes_name", nodes.c.name)

# What ``acpctl search`` finds (0012): one document per prompt (``role`` user, written with
# its ``prompt`` event) and one per turn of the agent (``role`` agent: its message text and
# tool titles, written with the event that ends the turn), each in the transaction of that
# event. ``seq`` is the event's. The full-text index is the backend's own and is made by
# ``store/search_ddl.py``: an FTS5 table kept in step by triggers on SQLite, a GIN index over
# ``to_tsvector('simple', body)`` on PostgreSQL.
search_docs = Table(
    "search_docs",
    metadata,
    Column("id", BIG, primary_key=True),
    Column("session_id", String, ForeignKey("sessions.id"), nullable=False),
    Column("command_id", String, nullable=True),
    Column("seq", BIG, nullable=False),
    Column("role", String, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("body", Text, nullable=False),
)
Index("ix_search_docs_session", search_docs.c.session_id, search_docs.c.command_id)
