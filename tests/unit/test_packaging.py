"""What the wheel ships: every package-data pattern names files that exist (a pattern that
matches nothing ships nothing, silently), and the migrations are among them."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_data_pattern_matches_a_file() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_data = config["tool"]["setuptools"]["package-data"]
    for package, patterns in package_data.items():
        for pattern in patterns:
            assert list((ROOT / package).glob(pattern)), f"{package}: {pattern} matches nothing"
    versions = list((ROOT / "store").glob("migrations/versions/*.py"))
    assert len(versions) >= 7
