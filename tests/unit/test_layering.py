"""The import rule of the tree, as a test: ``control_plane -> actors -> {protocol, store} ->
state_machines``, and nothing upward or sideways between ``protocol`` and ``store``. Every
import of every product module counts, including those inside functions and under
``TYPE_CHECKING`` (a type import is still a dependency of the design)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("control_plane", "actors", "protocol", "store", "state_machines")
ALLOWED: dict[str, set[str]] = {
    "control_plane": {"actors", "protocol", "store", "state_machines"},
    "actors": {"protocol", "store", "state_machines"},
    "protocol": {"state_machines"},
    "store": {"state_machines"},
    "state_machines": set(),
}


def _imported_packages(path: Path) -> set[tuple[str, int]]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in PACKAGES:
                found.add((top, node.lineno))
    return found


def test_every_import_follows_the_layering() -> None:
    wrong = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for top, line in _imported_packages(path):
                if top != package and top not in ALLOWED[package]:
                    wrong.append(f"{path.relative_to(ROOT)}:{line} imports {top}")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_the_rule_sees_a_wrong_edge(tmp_path: Path) -> None:
    """The checker itself: an upward import is found (so the test above can fail)."""
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from control_plane import api\n")
    assert _imported_packages(module) == {("control_plane", 2)}


def test_the_mcp_server_process_loads_neither_sqlalchemy_nor_the_store() -> None:
    """It starts with every agent's session/new: it must stay a small stdlib process."""
    probe = (
        "import sys, control_plane.subagents.mcp_server; "
        "heavy = ('sqlalchemy', 'store', 'actors'); "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in heavy); "
        "print(','.join(bad))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
