"""Shared CLI plumbing: configuration, opening the store, output, errors and exit codes.

Exit codes: 0 success, 1 the work failed (a batch with failed tasks), 2 usage or input
errors. Errors go to stderr in one line that says what to do.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console

from state_machines import (
    CommandNotFound,
    ControlPlaneError,
    IdempotencyConflict,
    SessionClosed,
    SessionNotFound,
    StoreError,
    StoreUnavailable,
    TokenNotFound,
)

if TYPE_CHECKING:  # heavy (pydantic, the SDK schema, SQLAlchemy): imported where used
    from control_plane.api import ControlPlane
    from control_plane.config import Config
    from store import Store

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def input_errors() -> tuple[type[Exception], ...]:
    """Errors that mean the input was wrong (exit 2). ``AgentCommandError``, ``ConfigError``
    and ``TaskFileError`` live in modules that ``--help`` does not import; they are imported
    when an error needs sorting."""
    from actors.workspace.git import WorkspaceError
    from control_plane.agents import AgentCommandError
    from control_plane.batch.tasks import TaskFileError
    from control_plane.config import ConfigError
    from control_plane.metrics import MetricsAddressError
    from control_plane.remote.run import ListenRefused
    from control_plane.timespec import TimeSpecError
    from store.ops.fork import ForkRefused
    from store.search_query import SearchQueryError

    return (
        SearchQueryError,
        TimeSpecError,
        MetricsAddressError,
        ListenRefused,
        TokenNotFound,
        AgentCommandError,
        WorkspaceError,
        ForkRefused,
        ConfigError,
        TaskFileError,
        SessionNotFound,
        CommandNotFound,
        IdempotencyConflict,
        SessionClosed,
    )


out = Console()
err = Console(stderr=True)


@dataclass
class Context:
    config_path: str | None = None
    db: str | None = None
    log_format: str | None = None

    def config(self) -> Config:
        """The effective configuration; logging is set up from it on the way (format, and
        the secrets no log line may show)."""
        from control_plane.config import ConfigError, load_config, store_file
        from control_plane.logs import configure_logging

        config = load_config(self.config_path)
        if self.db is not None:
            try:
                db = store_file(self.db)  # model_copy does not run the validators
            except ValueError as exc:
                raise ConfigError(f"--db: {exc}") from None
            config = config.model_copy(update={"db": db})
        if self.log_format is not None:
            config = config.model_copy(update={"log_format": self.log_format})
        configure_logging(config)
        from control_plane.tracing import configure_tracing

        configure_tracing(config)  # nothing to import unless tracing is asked for
        return config


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def errors_as_exit() -> Iterator[None]:
    try:
        yield
    except typer.Exit:
        raise
    except ControlPlaneError as exc:  # input errors and StoreError are ControlPlaneErrors too
        if isinstance(exc, input_errors()):
            fail(str(exc), EXIT_USAGE)
        if isinstance(exc, StoreUnavailable):  # the work could not go on; nothing is lost
            fail(str(exc), EXIT_FAILED)
        if isinstance(exc, StoreError):
            fail(str(exc), EXIT_USAGE)
        fail(str(exc), EXIT_FAILED)
    except KeyboardInterrupt:
        err.print("interrupted; nothing is lost: run the same command again to resume")
        raise typer.Exit(130) from None


def _store_location(ctx: Context, must_exist: bool) -> tuple[Config, str]:
    """The configuration and its store (file path or PostgreSQL URL); exit 2 when a store
    file must exist and does not (nothing is created). A PostgreSQL database is created by
    its administrator; connecting to one that is missing fails with the server's answer."""
    config = ctx.config()
    if must_exist and not config.db_is_url and not config.db_path.exists():
        fail(f"no store at {config.db_path}; pass --db or set ACPCTL_DB")
    return config, config.prepared_db()


@contextmanager
def opened(ctx: Context, run_sessions: bool, **settings: Any) -> Iterator[ControlPlane]:
    """A ControlPlane on the configured store, for commands that change sessions (read
    commands use ``opened_store``): ``run_sessions=False`` runs no agents, but deliveries
    resume as in any process that opens the control plane."""
    config, db = _store_location(ctx, must_exist=not run_sessions)
    from control_plane.api import ControlPlane

    cp = ControlPlane.open(
        db,
        config.store_options(),
        config.runtime_settings(**settings),
        run_sessions=run_sessions,
    )
    try:
        yield cp
    finally:
        cp.close()


@contextmanager
def opened_store(ctx: Context, create: bool = False) -> Iterator[Store]:
    """The configured store alone, for read commands: no runtime is built (no protocol
    loop, no supervisor, no deliveries), so looking starts fast and has no side effects on
    sessions or sinks. Missing store: exit 2, nothing created (``create``: created, for the
    commands that come before any session, like ``tokens create``)."""
    config, db = _store_location(ctx, must_exist=not create)
    from store import Store

    store = Store.open(db, config.store_options())
    try:
        yield store
    finally:
        store.close()


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def existing_file(path: Path) -> Path:
    if not path.exists():
        fail(f"{path} does not exist")
    if not path.is_file():
        fail(f"{path} is not a file")
    return path
