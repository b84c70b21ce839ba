"""The configuration examples in the docs are valid configuration (docs stay true)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from control_plane.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def _toml_blocks(doc: str) -> list[str]:
    return re.findall(r"```toml\n(.*?)```", (ROOT / "docs" / doc).read_text(), flags=re.S)


@pytest.mark.parametrize("doc", ["operations.md", "observability.md"])
def test_every_toml_example_loads(doc: str, tmp_path: Path) -> None:
    blocks = _toml_blocks(doc)
    assert blocks, f"no toml example in {doc}"
    for i, block in enumerate(blocks):
        path = tmp_path / f"example{i}.toml"
        path.write_text(block)
        load_config(str(path), environ={})  # a ConfigError fails the test with every problem
