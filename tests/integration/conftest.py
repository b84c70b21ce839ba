from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_harness import AgentHarness


@pytest.fixture
def harness(tmp_path: Path, db: str) -> Iterator[AgentHarness]:
    """tests/conftest.py's ``harness``, recording into ``db``: the agent connection tests run
    on each backend."""
    h = AgentHarness(tmp_path, db=db)
    try:
        yield h
    finally:
        h.close()
