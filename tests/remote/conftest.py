from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.remote_client import ListenServer, make_token


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ListenServer]:
    running = ListenServer(tmp_path)
    running.db.parent.mkdir(parents=True, exist_ok=True)
    running.secret = make_token(running.db, "tests")
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the tests' clients are asyncio's (anyio's pytest plugin runs them)
