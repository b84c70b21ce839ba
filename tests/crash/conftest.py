"""Fixtures of the crash and fault loops."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_storage_faults import _mount_tmpfs


@pytest.fixture
def fault_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "32m"):
        pytest.skip("mounting a small tmpfs needs root and mount(8) (a container may refuse)")
    try:
        yield disk
    finally:
        try:  # kept for a failure's post-mortem (the tmpfs goes with the unmount)
            shutil.copytree(
                disk, tmp_path / "disk-after", ignore=shutil.ignore_patterns("filler", "*.sock")
            )
        finally:
            subprocess.run(["umount", "-l", str(disk)], check=False)
