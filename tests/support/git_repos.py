"""Real git repositories for the workspace tests."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(path: Path, *args: str) -> str:
    """``git -C path ARGS``'s stdout; raises when it fails."""
    done = subprocess.run(
        ["git", "-C", str(path), *args], check=True, capture_output=True, text=True
    )
    return done.stdout


def make_repo(path: Path, files: dict[str, str]) -> Path:
    """A new repository at ``path`` with ``files`` (name -> text) in one commit."""
    path.mkdir(parents=True)
    git(path, "init", "-q")
    for name, text in files.items():
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return path
