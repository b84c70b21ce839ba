"""Preparing a session's worktree (``SessionWorkspace.prepare``) when it was not left
clean: two preparers at once, and a crash between the ready marker and checkpoint 0.

Two preparers: a fork's caller makes the fork's worktree while the supervisor's sweep may
already have started the fork's actor, which prepares it too. The second must wait and find
it ready, not take the first one's half-set-up worktree for a crash's debris and remove it
from under it (a CI run failed so: ``git add -A`` in the fork's worktree, "cannot change to
...: No such file or directory")."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from actors.session.workspace_steps import SessionWorkspace
from actors.workspace import ensure_worktree, plan_worktree
from state_machines.event_kinds import EventKind
from store import AgentSpec, Store, queries
from tests.support.git_repos import git, make_repo


def test_a_second_preparer_waits_for_the_first_and_finds_the_worktree_ready(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    # The setup holds the first preparer in the window between `worktree add` and the
    # ready marker for a second, long enough for the second to come in every time.
    spec = plan_worktree(str(repo), "raced", str(tmp_path / "ws"), setup="sleep 1")
    store = Store.open(str(tmp_path / "cp.db"))
    try:
        sid = store.spawn(AgentSpec("a", ("true",)), spec.cwd, None, None, None).session.id
        errors: list[BaseException] = []
        started = threading.Event()

        def prepare() -> None:
            started.set()
            try:
                SessionWorkspace(spec, sid, store, str(tmp_path / "logs"), 60).prepare()
            except BaseException as exc:  # reported by the assertion below
                errors.append(exc)

        first = threading.Thread(target=prepare)
        first.start()
        started.wait(5)
        setup_log = tmp_path / "logs" / f"{sid}.setup.log"
        deadline = time.monotonic() + 30
        while not setup_log.exists():  # then the worktree is added, not yet ready
            assert time.monotonic() < deadline, "the first preparer never reached its setup"
            time.sleep(0.01)
        second = threading.Thread(target=prepare)
        second.start()
        first.join(60)
        second.join(60)

        assert errors == []
        assert (Path(spec.path) / "a.txt").read_text() == "a\n"
        kinds = (EventKind.WORKSPACE_READY.value, EventKind.WORKSPACE_RESTORED.value)
        recorded = store.read(lambda c: queries.events_of_kinds_after(c, sid, kinds, 0))
        # Made and set up once, never "made again": the second found it ready.
        assert [e.kind for e in recorded] == [EventKind.WORKSPACE_READY.value]
        assert setup_log.read_text().count("$ sleep 1") == 1
    finally:
        store.close()


def test_a_ready_worktree_without_checkpoint_0_gets_it_at_the_next_start(tmp_path: Path) -> None:
    """The process died after the worktree's ready marker, before checkpoint 0: the next
    start takes it (no turn ran there), so a cut-off turn's restore has a baseline that
    holds what the setup made, not the bare base commit."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    spec = plan_worktree(str(repo), "crashed", str(tmp_path / "ws"), setup="echo made > setup.txt")
    store = Store.open(str(tmp_path / "cp.db"))
    try:
        sid = store.spawn(AgentSpec("a", ("true",)), spec.cwd, None, None, None).session.id
        assert ensure_worktree(spec, str(tmp_path / "setup.log"), 60).made  # then the crash
        workspace = SessionWorkspace(spec, sid, store, str(tmp_path / "logs"), 60)
        workspace.prepare()
        kinds = (EventKind.WORKSPACE_READY.value,)
        assert len(store.read(lambda c: queries.events_of_kinds_after(c, sid, kinds, 0))) == 1
        baseline = workspace.last_commit()
        assert baseline != spec.base
        assert git(Path(spec.path), "show", f"{baseline}:setup.txt") == "made\n"
    finally:
        store.close()
