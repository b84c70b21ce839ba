"""Alembic environment: always run on the connection the store hands over (never from an ini
URL), so migrations share the store's pragmas and its BEGIN IMMEDIATE transaction."""

from __future__ import annotations

from alembic import context

from store.schema import metadata
from store.search_ddl import in_schema_module

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=True,
    include_name=in_schema_module,  # the full-text index is each backend's own
)
with context.begin_transaction():
    context.run_migrations()
