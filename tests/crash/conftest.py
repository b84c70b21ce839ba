"""Fixtures of the crash and fault loops."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_storage_faults import mounted_small_disk


@pytest.fixture
def fault_disk(tmp_path: Path) -> Iterator[Path]:
    """The fault loop's store disk: a small tmpfs, its files kept after the test."""
    with mounted_small_disk(tmp_path, keep_copy=True) as disk:
        yield disk
