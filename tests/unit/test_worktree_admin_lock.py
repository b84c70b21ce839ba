"""Worktrees made and removed at once in one repository, by threads and by processes: git
does not serialize its worktree administration (a ``worktree prune`` beside a half-done
``worktree add`` removes the new worktree's record), so the control plane does
(``actors/workspace/git.py``, ``worktree_admin_lock``)."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from actors.workspace import ensure_worktree, plan_worktree
from actors.workspace.worktree import remove_worktree
from tests.support.git_repos import git, make_repo

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 5
PER_SIDE = 8

# One side of the race, in a process of its own: make PER_SIDE worktrees, remove half.
SIDE = """
import sys
from concurrent.futures import ThreadPoolExecutor
from actors.workspace import ensure_worktree, plan_worktree
from actors.workspace.worktree import remove_worktree
repo, root, tag, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
specs = [plan_worktree(repo, f"{tag}-{i}", root) for i in range(n)]
with ThreadPoolExecutor(n) as pool:
    list(pool.map(lambda s: ensure_worktree(s, root + "/" + s.branch.replace("/", "_"), 60), specs))
    list(pool.map(remove_worktree, specs[: n // 2]))
"""


def test_worktrees_made_and_removed_at_once_by_threads_and_processes_all_succeed(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    root = tmp_path / "ws"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    for r in range(ROUNDS):
        other = subprocess.Popen(
            [sys.executable, "-c", SIDE, str(repo), str(root), f"p{r}", str(PER_SIDE)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        specs = [plan_worktree(str(repo), f"t{r}-{i}", str(root)) for i in range(PER_SIDE)]
        with ThreadPoolExecutor(PER_SIDE) as pool:
            made = list(
                pool.map(lambda s: ensure_worktree(s, str(tmp_path / "setup.log"), 60), specs)
            )
            list(pool.map(remove_worktree, specs[: PER_SIDE // 2]))
        _, err = other.communicate(timeout=120)
        assert other.returncode == 0, err[-2000:]
        assert all(m.made for m in made)
    listed = git(repo, "worktree", "list", "--porcelain")
    kept = [line for line in listed.splitlines() if line.startswith("worktree ")]
    # The main checkout plus, per round and side, the half that was not removed.
    assert len(kept) == 1 + ROUNDS * 2 * (PER_SIDE - PER_SIDE // 2), listed
    for line in kept[1:]:
        assert Path(line.split(" ", 1)[1], "a.txt").read_text() == "a\n"
