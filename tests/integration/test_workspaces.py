"""Worktree workspaces on real git repositories: one worktree per task, checkpoints that
leave the branch, index and stash alone, files put back before a cut-off turn runs again,
the spawn's recorded intent made good after a crash, setup commands, prune."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from actors.workspace import WorkspaceError
from control_plane import ControlPlane
from tests.conftest import eventually
from tests.support.cp_harness import example_agent, open_cp
from tests.support.git_repos import git, make_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"a.txt": "hello\n", ".gitignore": "*.log\n"})


def acpctl(tmp: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "control_plane.cli", "--db", str(tmp / "cp.db"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp)


def results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def checkpointed(cp: ControlPlane, session_id: str, count: int) -> bool:
    return len(cp.events_of_kinds(session_id, ("checkpoint",))) >= count


@pytest.mark.timeout(180)
def test_eight_parallel_tasks_in_one_repository_get_eight_branches_and_see_only_their_own(
    tmp_path: Path, repo: Path
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    # Every task writes the same file: each must find only its own content there.
    lines = [
        {"id": f"t{i}", "prompt": f"#write=shared.txt:t{i} go", "cwd": str(repo)} for i in range(8)
    ]
    tasks.write_text("".join(json.dumps(x) + "\n" for x in lines))
    done = acpctl(
        tmp_path, "batch", str(tasks), "--agent", "example", "--workspace", "worktree", "-j", "8"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = results(tmp_path / "tasks.results.jsonl")
    assert [r["status"] for r in rows] == ["ok"] * 8
    paths = {r["id"]: Path(r["workspace"]["path"]) for r in rows}
    assert len(set(paths.values())) == 8
    for task_id, path in paths.items():
        assert (path / "shared.txt").read_text() == task_id  # its own edit, nobody else's
        assert (path / "a.txt").read_text() == "hello\n"
        row = next(r for r in rows if r["id"] == task_id)
        assert row["workspace"]["branch"].endswith(f"/{task_id}")
        assert row["workspace"]["checkpoint"].startswith("refs/acpctl/")
        assert "1 file changed" in row["workspace"]["diffstat"]
    branches = git(repo, "branch", "--list", "acpctl/*").split()
    assert len([b for b in branches if b.startswith("acpctl/")]) == 8
    assert not (repo / "shared.txt").exists()  # the user's checkout is untouched
    assert git(repo, "status", "--porcelain") == ""


def test_a_cwd_outside_git_is_a_clear_error_and_creates_nothing(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "a", "prompt": "hi", "cwd": str(plain)}) + "\n")
    done = acpctl(tmp_path, "batch", str(tasks), "--agent", "example", "--workspace", "worktree")
    assert done.returncode == 2, done.stderr
    assert "is not in a git repository" in done.stderr
    assert not (tmp_path / "cp.db").exists() and not (tmp_path / "workspaces").exists()
    (tmp_path / "api").mkdir()
    with open_cp(tmp_path / "api") as cp, pytest.raises(WorkspaceError, match="git repository"):
        cp.spawn("example", plain, "hi", workspace="worktree")
    assert not (tmp_path / "api" / "workspaces").exists()


def test_checkpoints_leave_branch_index_and_stash_alone(tmp_path: Path, repo: Path) -> None:
    with open_cp(tmp_path) as cp:
        spawned = cp.spawn(
            example_agent(tmp_path), repo, "#write=b.txt:one first", workspace="worktree"
        )
        assert spawned.command is not None
        sid = spawned.session.id
        assert cp.wait(spawned.command.id, 60).ok
        second = cp.prompt(sid, "#write=c.txt:two second")
        assert cp.wait(second.id, 60).ok
        eventually(lambda: checkpointed(cp, sid, 2), 30, "two checkpoints")
        wt = Path(cp.get(sid).cwd)
        base = json.loads(json.dumps(cp.get(sid).metadata["workspace"]))["base"]
        assert git(wt, "rev-parse", "HEAD").strip() == base  # the branch did not move
        assert git(wt, "diff", "--cached", "--name-only") == ""  # nor the index
        assert git(wt, "stash", "list") == ""
        (wt / "x.log").write_text("ignored\n")
        refs = git(repo, "for-each-ref", "--format=%(refname)", f"refs/acpctl/{sid}/").split()
        assert refs == [f"refs/acpctl/{sid}/{n}" for n in (0, 1, 2)]
        last = refs[-1]
        assert sorted(git(repo, "ls-tree", "-r", "--name-only", last).split()) == [
            ".gitignore",
            "a.txt",
            "b.txt",
            "c.txt",
        ]
        events = cp.events_of_kinds(sid, ("workspace_ready", "checkpoint"))
        assert [e.kind for e in events] == ["workspace_ready", "checkpoint", "checkpoint"]
        assert all(len(e.payload["tree"]) == 40 for e in events)
    diff = acpctl(tmp_path, "sessions", "diff", sid, "--turn", "2")
    assert diff.returncode == 0 and "+two" in diff.stdout and "b.txt" not in diff.stdout


def test_setup_runs_in_the_new_worktree_and_its_failure_fails_the_task(
    tmp_path: Path, repo: Path
) -> None:
    with open_cp(tmp_path) as cp:
        ok = cp.spawn(
            "example", repo, "hi", workspace="worktree", setup="echo set-up > ready.txt; echo done"
        )
        assert ok.command is not None and cp.wait(ok.command.id, 60).ok
        wt = Path(cp.get(ok.session.id).cwd)
        assert (wt / "ready.txt").read_text() == "set-up\n"
        (ready,) = cp.events_of_kinds(ok.session.id, ("workspace_ready",))
        assert ready.payload["setup"]["exit"] == 0
        assert "done" in Path(ready.payload["setup"]["log"]).read_text()
        bad = cp.spawn("example", repo, "hi", workspace="worktree", setup="echo broken >&2; exit 3")
        assert bad.command is not None
        outcome = cp.wait(bad.command.id, 60)
        assert not outcome.ok
        error = cp.command(bad.command.id).error or ""
        assert "workspace setup `echo broken >&2; exit 3` failed with exit 3" in error
        # Its output is in its log, never in the store (a setup may print secrets).
        assert "broken\n" not in error and ".setup.log" in error
        log = error.rsplit("its output: ", 1)[1].rstrip(")")
        assert "broken" in Path(log).read_text()


def test_a_spawn_whose_worktree_a_crash_left_unmade_or_half_made_gets_it_at_start(
    tmp_path: Path, repo: Path
) -> None:
    db = tmp_path / "cp.db"
    # The spawn commits (the recorded intent); the process ends before any session runs.
    with ControlPlane.open(db, run_sessions=False) as cp:
        first = cp.spawn("example", repo, "#write=b.txt:x one", workspace="worktree")
        second = cp.spawn("example", repo, "#write=b.txt:y two", workspace="worktree")
    assert first.command is not None and second.command is not None
    half = Path(second.session.cwd)
    assert not Path(first.session.cwd).exists() and not half.exists()
    # As a kill during `git worktree add` (or during the setup) leaves it: added, part of
    # its files missing, never marked ready.
    branch = second.session.metadata["workspace"]["branch"]
    git(repo, "worktree", "add", "-b", branch, str(half), "HEAD")
    (half / "a.txt").unlink()
    (half / "stray.txt").write_text("partial")
    # A directory at a planned path that is not a worktree of the repository is not ours.
    third = None
    with ControlPlane.open(db, run_sessions=False) as cp:
        third = cp.spawn("example", repo, "#write=b.txt:z three", workspace="worktree")
    assert third.command is not None
    foreign = Path(third.session.cwd)
    foreign.mkdir(parents=True)
    (foreign / ".git").write_text("gitdir: /somewhere/else/.git/worktrees/x\n")
    (foreign / "mine.txt").write_text("not the control plane's\n")
    with open_cp(tmp_path, db=str(db)) as cp:
        assert cp.wait(first.command.id, 60).ok and cp.wait(second.command.id, 60).ok
        assert (Path(first.session.cwd) / "b.txt").read_text() == "x"
        assert (half / "b.txt").read_text() == "y"
        assert (half / "a.txt").read_text() == "hello\n" and not (half / "stray.txt").exists()
        refused = cp.wait(third.command.id, 60)
        assert not refused.ok
        assert "worktree of another repository" in (cp.command(third.command.id).error or "")
    assert (foreign / "mine.txt").read_text() == "not the control plane's\n"  # untouched
    assert len(git(repo, "worktree", "list").splitlines()) == 3


@pytest.mark.timeout(180)
def test_kill_9_mid_turn_puts_the_files_back_before_the_turn_runs_again(
    tmp_path: Path, repo: Path
) -> None:
    # The turn writes a file, then hangs: kill -9 while it hangs.
    args, half = _batch_killed_after_a_half_done_edit(tmp_path, repo)
    again = acpctl(tmp_path, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    (row,) = results(tmp_path / "tasks.results.jsonl")
    assert row["status"] == "ok" and row["attempts"] == 2
    assert not half.exists()  # the cut-off turn's edit was undone before the continuation
    with ControlPlane.open(tmp_path / "cp.db", run_sessions=False) as cp:
        (restored,) = cp.events_of_kinds(row["sessionId"], ("workspace_restored",))
        assert restored.payload["removed"] == ["half.txt"]
        prompts = cp.events_of_kinds(row["sessionId"], ("prompt",))
        assert prompts[-1].payload.get("continuation") is True
        assert "were restored" in prompts[-1].payload["content"][0]["text"]


def test_prune_removes_closed_worktrees_but_never_unsaved_work(tmp_path: Path, repo: Path) -> None:
    with open_cp(tmp_path) as cp:
        clean = cp.spawn("example", repo, "#write=b.txt:c one", workspace="worktree")
        dirty = cp.spawn("example", repo, "#write=b.txt:d one", workspace="worktree")
        live = cp.spawn("example", repo, "#write=b.txt:e one", workspace="worktree")
        for s in (clean, dirty, live):
            assert s.command is not None and cp.wait(s.command.id, 60).ok
            sid = s.session.id
            eventually(lambda sid=sid: checkpointed(cp, sid, 1), 30, "checkpoint")  # type: ignore[misc]
        cp.close_session(clean.session.id)
        cp.close_session(dirty.session.id)
    (Path(dirty.session.cwd) / "unsaved.txt").write_text("after the last checkpoint\n")
    pruned = acpctl(tmp_path, "workspaces", "prune", "--json")
    report = json.loads(pruned.stdout)
    assert pruned.returncode == 1
    assert [r["session"] for r in report["removed"]] == [clean.session.id]
    assert [r["session"] for r in report["kept"]] == [dirty.session.id]
    assert not Path(clean.session.cwd).exists()
    assert (Path(dirty.session.cwd) / "unsaved.txt").exists()
    assert Path(live.session.cwd).exists()  # not closed: not a candidate
    diff = acpctl(tmp_path, "sessions", "diff", clean.session.id)  # the refs keep the work
    assert diff.returncode == 0 and "+c" in diff.stdout
    forced = acpctl(tmp_path, "workspaces", "prune", "--force", "--json")
    assert forced.returncode == 0, forced.stdout
    assert not Path(dirty.session.cwd).exists()
    listed = json.loads(acpctl(tmp_path, "workspaces", "list", "--json").stdout)
    assert {r["session"]: r["exists"] for r in listed} == {
        clean.session.id: False,
        dirty.session.id: False,
        live.session.id: True,
    }


@pytest.mark.timeout(180)
def test_fork_at_turn_1_of_3_has_turn_1s_files_and_conversation(tmp_path: Path, repo: Path) -> None:
    with open_cp(tmp_path) as cp:
        spawned = cp.spawn(
            example_agent(tmp_path), repo, "#write=f1.txt:one first", workspace="worktree"
        )
        assert spawned.command is not None
        sid = spawned.session.id
        assert cp.wait(spawned.command.id, 60).ok
        for n, word in ((2, "two second"), (3, "three third")):
            assert cp.wait(cp.prompt(sid, f"#write=f{n}.txt:{word}").id, 60).ok
        eventually(lambda: checkpointed(cp, sid, 3), 30, "three checkpoints")

        forked = cp.fork(sid, 1)
        fid = forked.session.id
        assert forked.session.metadata["forkOf"] == {"session": sid, "turn": 1}
        copied = [e for e in cp.events(fid) if e.kind == "prompt"]
        assert [e.payload["content"][0]["text"] for e in copied] == ["#write=f1.txt:one first"]
        answer = cp.wait(cp.prompt(fid, "#history what came before").id, 60)
        assert answer.ok
        wt = Path(cp.get(fid).cwd)
        assert (wt / "f1.txt").read_text() == "one" and not (wt / "f2.txt").exists()
        assert not (wt / "f3.txt").exists()
        assert "first" in answer.text and "second" not in answer.text  # the seeded prefix
        (seed,) = cp.events_of_kinds(fid, ("fork_seed",))
        assert seed.payload["chars"] > 0
        started = cp.events_of_kinds(fid, ("agent_started",))
        assert [e.payload["how"] for e in started] == ["new"]
        exported = tmp_path / "fork.jsonl"
        cp.export_jsonl(fid, exported)
        text = exported.read_text()
        assert "one first" in text and "two second" not in text

        rewound = cp.fork(sid, 2, supersede=True)
        assert cp.get(sid).state.value == "closed"
        (closed,) = cp.events_of_kinds(sid, ("closed",))
        assert rewound.session.id in closed.payload["reason"]
        rwt = Path(cp.get(rewound.session.id).cwd)
        assert (rwt / "f2.txt").read_text() == "two" and not (rwt / "f3.txt").exists()
    refused = acpctl(tmp_path, "sessions", "fork", sid, "--at", "7")
    assert refused.returncode == 2 and "no finished turn 7" in refused.stderr, refused.stderr
    listed = acpctl(tmp_path, "sessions", "fork", sid, "--at", "3", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["forkOf"] == {"session": sid, "turn": 3}


def test_a_worktree_removed_under_a_live_session_comes_back_with_its_checkpointed_files(
    tmp_path: Path, repo: Path
) -> None:
    import shutil

    with open_cp(tmp_path) as cp:
        spawned = cp.spawn(
            example_agent(tmp_path), repo, "#write=b.txt:kept one", workspace="worktree"
        )
        assert spawned.command is not None and cp.wait(spawned.command.id, 60).ok
        sid = spawned.session.id
        eventually(lambda: checkpointed(cp, sid, 1), 30, "a checkpoint")
    wt = Path(spawned.session.cwd)
    shutil.rmtree(wt)
    with open_cp(tmp_path) as cp:
        assert cp.wait(cp.prompt(sid, "again").id, 60).ok
        assert (wt / "b.txt").read_text() == "kept"
        (restored,) = cp.events_of_kinds(sid, ("workspace_restored",))
        assert restored.payload["why"] == "the worktree was made again"


@pytest.mark.timeout(180)
def test_a_cut_off_turn_whose_files_cannot_be_restored_is_not_run_on_them(
    tmp_path: Path, repo: Path
) -> None:
    args, half = _batch_killed_after_a_half_done_edit(tmp_path, repo)
    # The session's only checkpoint made unreadable: its ref names a blob, not a commit.
    (ref,) = git(repo, "for-each-ref", "--format=%(refname)", "refs/acpctl/").split()
    blob = subprocess.run(
        ["git", "-C", str(repo), "hash-object", "-w", "--stdin"],
        input="not a commit", capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    git(repo, "update-ref", ref, blob)
    again = acpctl(tmp_path, *args)
    assert again.returncode == 1, again.stderr[-3000:]
    (row,) = results(tmp_path / "tasks.results.jsonl")
    assert row["status"] == "interrupted" and "could not be restored" in row["error"], row
    assert half.read_text() == "half"  # left as the cut-off turn left it, for a person
    with ControlPlane.open(tmp_path / "cp.db", run_sessions=False) as cp:
        (restored,) = cp.events_of_kinds(row["sessionId"], ("workspace_restored",))
        assert "error" in restored.payload
        prompts = cp.events_of_kinds(row["sessionId"], ("prompt",))
        assert len(prompts) == 1  # never claimed again, never sent again


def _batch_killed_after_a_half_done_edit(
    tmp_path: Path, repo: Path
) -> tuple[tuple[str, ...], Path]:
    """A batch whose one task, in a worktree, writes ``half.txt`` and hangs, killed -9 then:
    the batch's arguments and the half-done file."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps({"id": "t", "prompt": "#write=half.txt:half #hang", "cwd": str(repo)}) + "\n"
    )
    args = ("batch", str(tasks), "--agent", "example", "--workspace", "worktree")
    cmd = [sys.executable, "-m", "control_plane.cli", "--db", str(tmp_path / "cp.db"), *args]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wt_files() -> list[Path]:
        return list((tmp_path / "workspaces").rglob("half.txt"))

    try:
        eventually(lambda: wt_files() or proc.poll() is not None, 60, "the half-done edit")
        assert wt_files(), proc.returncode
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    (half,) = wt_files()
    return args, half
