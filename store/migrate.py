"""Apply Alembic migrations when a store is opened, so a database written by an older release
opens under a newer one. A store already at head costs one small query, not an Alembic run."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade_to_head(write_engine: Engine, read_engine: Engine) -> None:
    """Check the revision on a reader (no write lock needed when already at head), then
    migrate on the writer connection."""
    if current_revision(read_engine) == head_revision():
        return
    config = _config()
    with write_engine.connect() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
