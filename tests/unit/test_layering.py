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


def _imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_front_ends_reach_the_control_plane_only_through_narrow_interfaces() -> None:
    """``control_plane.api`` builds the subagent bridge, so the bridge may not import it back
    (it is written against ``SubagentHost``); and no front end (serve, batch, subagents, the
    CLI) imports the runtime's own machinery to go around ``ControlPlane``."""
    machinery = {"actors.supervisor", "actors.delivery.service", "protocol.loop", "store.writer"}
    wrong = []
    for front_end in ("subagents", "serve", "batch", "cli"):
        for path in sorted((ROOT / "control_plane" / front_end).rglob("*.py")):
            imported = _imported_modules(path)
            if front_end == "subagents" and "control_plane.api" in imported:
                wrong.append(f"{path.relative_to(ROOT)} imports control_plane.api")
            for module in imported:
                if any(module == m or module.startswith(m + ".") for m in machinery):
                    wrong.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not wrong, "\n".join(wrong)
