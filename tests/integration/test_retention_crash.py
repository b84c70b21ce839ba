"""A gc killed (a real SIGKILL) half-way through deleting a tree leaves a consistent store:
the tree is claimed (closed, marked, its archive verified), nothing of it can run again, and
the next gc finishes it without archiving it again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from state_machines import SessionClosed
from store import CommandKind, Store
from store.faults import ENV_VAR
from tests.support.direct_sql import query
from tests.support.retention_trees import acpctl, all_gone, consistent, make_session


def _env(tmp_path: Path, fault: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACPCTL_")}
    env.pop(ENV_VAR, None)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "no-config")
    if fault is not None:
        env[ENV_VAR] = fault
    return env


def _big_tree(db: str) -> tuple[str, list[str]]:
    with Store.open(db) as s:
        root = make_session(s, "idle", events=3_000)
        children = [make_session(s, "closed", parent=root, events=800) for _ in range(2)]
        s.close_session(root)
    return root, [root, *children]


@pytest.mark.parametrize(
    "fault",
    [
        "retention.between_transactions=after:2:kill",  # between two transactions
        # Inside one (it is rolled back): the same outcome, in the full matrix.
        pytest.param("retention.in_transaction=after:2:kill", marks=pytest.mark.full),
    ],
)
def test_a_gc_killed_mid_deletion_is_finished_by_the_next(
    tmp_path: Path, db: str, fault: str
) -> None:
    root, ids = _big_tree(db)
    archive = tmp_path / "archive"
    target = archive / f"{root}.tar.gz"

    killed = acpctl(
        db, "gc", "--older-than", "0s", "--archive", str(archive), env=_env(tmp_path, fault)
    )

    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = query(db, "SELECT count(*) FROM events WHERE session_id IN (?, ?, ?)", ids)[0][0]
    assert 0 < left < 4_606  # some deleted, not all
    assert consistent(db) == []
    # Claimed: closed and marked with its verified archive, so nothing runs it again.
    ((state, metadata),) = query(db, "SELECT state, metadata FROM sessions WHERE id = ?", (root,))
    mark = json.loads(metadata)["retentionClaim"]
    assert state == "closed" and mark["archive"]["path"] == str(target)
    with Store.open(db) as s, pytest.raises(SessionClosed):
        s.enqueue(root, CommandKind.PROMPT, {"prompt": [{"type": "text", "text": "again"}]})
    first_archive = target.stat()
    check = subprocess.run(["sha256sum", "-c", f"{target.name}.sha256"], cwd=archive)
    assert check.returncode == 0

    # The next gc (default age: the claim, not the age, brings it back) finishes it.
    done = acpctl(db, "gc", "--archive", str(archive), "--json", env=_env(tmp_path))

    assert done.returncode == 0, done.stderr
    (tree,) = json.loads(done.stdout)["deleted"]
    assert tree["root"] == root and tree["resumed"] and tree["finished"]
    assert tree["archive"]["path"] == str(target)  # the one recorded by the killed gc
    assert all_gone(db, ids)
    assert consistent(db) == []
    assert target.stat().st_mtime_ns == first_archive.st_mtime_ns  # not written again
    assert target.stat().st_ino == first_archive.st_ino
