"""Putting a worktree's files back to a checkpoint, on a real git repository: what a cut-off
turn made goes, what it changed comes back, and ignored files stay, even when the turn
un-ignored them."""

from __future__ import annotations

from pathlib import Path

from actors.workspace import ensure_worktree, plan_worktree, restore, take_checkpoint
from actors.workspace.spec import safe_name
from tests.support.git_repos import git, make_repo


def test_restore_undoes_a_turn_and_keeps_ignored_files(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "original\n", ".gitignore": "*.env\n"})
    spec = plan_worktree(str(repo), "restore-test", str(tmp_path / "ws"))
    ensure_worktree(spec, str(tmp_path / "setup.log"), 60)
    wt = Path(spec.path)
    (wt / "secrets.env").write_text("API_KEY=keep-me\n")  # ignored: in no checkpoint
    before = take_checkpoint(spec, "s", 0)

    # A turn: edits, a new file, the ignore rule removed, a repository cloned in.
    (wt / "a.txt").write_text("half-done edit\n")
    (wt / "new.txt").write_text("made by the cut-off turn\n")
    (wt / ".gitignore").write_text("")
    nested = wt / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    (nested / "x.txt").write_text("x\n")
    git(nested, "add", "-A")
    git(nested, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    take_checkpoint(spec, "s", 1, before.commit)  # the nested repository as a gitlink

    written, removed = restore(spec, before.commit)
    assert (wt / "a.txt").read_text() == "original\n"
    assert (wt / ".gitignore").read_text() == "*.env\n"
    assert not (wt / "new.txt").exists() and not nested.exists()
    assert (wt / "secrets.env").read_text() == "API_KEY=keep-me\n"  # ignored again: kept
    assert "new.txt" in removed and "secrets.env" not in removed
    assert written == 2  # .gitignore, a.txt


def test_names_that_clean_to_the_same_text_get_their_own_worktrees(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    root = str(tmp_path / "ws")
    specs = [
        plan_worktree(str(repo), name, root) for name in ("fix bug", "fix-bug", "修复", "测试")
    ]
    assert len({s.path for s in specs}) == 4 and len({s.branch for s in specs}) == 4
    assert specs[1].branch == "acpctl/fix-bug"  # a clean name is kept as it is
    assert safe_name("../../etc") == "etc"  # no way out of the root
    for spec in specs:
        assert Path(spec.path).parent == Path(root) / "repo"
