"""The modules of ``control_plane/remote/`` that the connection is made of name each other's
needs as Protocols (``roles.py``, ``connection.ConnectionHost``, ``access.Caller``,
``auth.TokenHolder``), never each other's classes: run-time imports go one way (hub ->
connection -> agent, access; hub -> permissions), and nothing imports back, not even for
types. And the SDK's private transport module is imported in one place."""

from __future__ import annotations

import ast
from pathlib import Path

REMOTE = Path(__file__).resolve().parents[2] / "control_plane" / "remote"

# module -> the modules of remote/ it must not import (under TYPE_CHECKING neither)
NOT_BACK = {
    "access": {"connection", "hub", "agent", "permissions"},
    "agent": {"connection", "hub", "permissions"},
    "permissions": {"connection", "hub", "agent"},
    "pending_permission": {"connection", "hub", "agent", "permissions"},
    "permission_watch": {"connection", "hub", "agent", "permissions"},
    "follow": {"connection", "hub", "agent", "permissions"},
    "connection": {"hub", "permissions", "app", "ws"},
    "auth": {"hub", "connection"},
}


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_no_module_names_the_class_of_one_that_holds_it() -> None:
    for module, forbidden in NOT_BACK.items():
        imported = _imported(REMOTE / f"{module}.py")
        back = {m for m in forbidden if f"control_plane.remote.{m}" in imported}
        assert not back, f"control_plane/remote/{module}.py imports {sorted(back)}"


def test_the_sdks_private_transport_is_imported_in_one_module() -> None:
    root = REMOTE.parents[1]
    users = [
        str(path.relative_to(root))
        for package in ("control_plane", "protocol", "actors", "store")
        for path in (root / package).rglob("*.py")
        if any(m.startswith("acp._") for m in _imported(path))
    ]
    assert users == ["control_plane/remote/sdk_transport.py"]
