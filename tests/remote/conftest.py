from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.remote_client import ListenServer, running_server


@pytest.fixture
def server(tmp_path: Path, db: str) -> Iterator[ListenServer]:
    """A started ``serve --listen`` on ``db``: every test that takes it runs on each backend."""
    with running_server(tmp_path, token_name="tests", db=db) as started:
        yield started


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the tests' clients are asyncio's (anyio's pytest plugin runs them)
