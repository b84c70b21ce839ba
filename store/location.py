"""Where a store lives: a SQLite file (the embedded default) or a PostgreSQL database.

``--db`` and ``db`` take either a file path (``sqlite:///PATH`` is the same path) or a
``postgresql://`` URL. Any other scheme is refused here, by name: it used to become a local
directory named after the scheme, with a SQLite file in it, and the run "succeeded".

The URL's password never leaves this module in clear: ``display`` (used in every error, log
line and ``acpctl status``) masks it, and only ``url`` (handed to the driver) keeps it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from state_machines.errors import StoreError


class Backend(StrEnum):
    SQLITE = "sqlite"
    POSTGRESQL = "postgresql"


_SQLITE_SCHEMES = ("sqlite", "sqlite+pysqlite")
# psycopg 3 is the one PostgreSQL driver: a URL naming another one is refused, not rerouted.
_POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")


class UnsupportedLocation(StoreError, ValueError):
    """A ``--db`` value this release cannot open (the message says what it can). A
    ``ValueError`` too: the configuration's validators report it as a bad value."""


@dataclass(frozen=True)
class StoreLocation:
    backend: Backend
    # The SQLite file (absolute), or the SQLAlchemy URL with its password (driver only).
    target: str
    # What errors, logs and status show: the file, or the URL with its password masked.
    display: str

    @property
    def is_file(self) -> bool:
        return self.backend is Backend.SQLITE

    def sqlalchemy_url(self) -> str:
        if self.backend is Backend.SQLITE:
            return f"sqlite:///{self.target}"
        return self.target


def _scheme(value: str) -> str | None:
    scheme, sep, _ = value.partition("://")
    if not sep or not scheme or not scheme.replace("+", "").replace("-", "").isalnum():
        return None
    return scheme.lower()


def is_url(value: str) -> bool:
    return _scheme(value) is not None


def check_db_value(value: str) -> str:
    """The ``--db``/``db`` value as the configuration keeps it: a path (``sqlite:///PATH``
    becomes PATH) or a PostgreSQL URL; ``UnsupportedLocation`` for anything else."""
    scheme = _scheme(value)
    if scheme is None:
        return value
    if scheme in _SQLITE_SCHEMES:
        rest = value.partition("://")[2]
        if rest.startswith("/"):
            return rest
        raise UnsupportedLocation(
            f"db {value!r}: a SQLite URL needs an absolute path (sqlite:////abs/path/acpctl.db "
            "or just the path)"
        )
    if scheme in _POSTGRES_SCHEMES:
        _postgres_url(value)  # refuses a malformed one now, not at first use
        return value
    raise UnsupportedLocation(
        f"db {value!r}: {scheme}:// stores are not supported; give a SQLite file path (or "
        "sqlite:///PATH) or a postgresql://USER@HOST:PORT/DATABASE URL"
    )


def _postgres_url(value: str) -> URL:
    try:
        url = make_url(value)
    except ArgumentError as exc:
        raise UnsupportedLocation(f"db: not a valid PostgreSQL URL ({exc})") from None
    if not url.database:
        raise UnsupportedLocation(
            f"db {mask_password(value)!r}: name the database (postgresql://USER@HOST/DATABASE)"
        )
    return url.set(drivername="postgresql+psycopg")


def mask_password(value: str) -> str:
    try:
        return make_url(value).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"


def locate(value: str | os.PathLike[str]) -> StoreLocation:
    text = os.fspath(value)
    checked = check_db_value(text)
    if is_url(checked):
        url = _postgres_url(checked)
        return StoreLocation(
            Backend.POSTGRESQL,
            url.render_as_string(hide_password=False),
            url.set(drivername="postgresql").render_as_string(hide_password=True),
        )
    path = os.path.abspath(os.path.expanduser(checked))
    return StoreLocation(Backend.SQLITE, path, path)
