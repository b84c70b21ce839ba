"""``acpctl gc --archive``: a tree of real example-agent sessions archived, verified and
then deleted; what the archive holds is what the store held (the transcript equal to
``acpctl sessions export``, the raw log event for event), and ``sha256sum -c`` agrees."""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from control_plane.cli import app
from control_plane.retention.archive import ArchiveStopped, write_archive
from state_machines import CommandState
from store import Store
from store.ownership import this_owner
from store.queries.retention import RetentionRule, judge_tree
from tests.support.cp_harness import example_agent, noop_agent, open_cp
from tests.support.direct_sql import query
from tests.support.retention_trees import all_gone, make_session

runner = CliRunner()


def _run(db: str, *args: str) -> str:
    result = runner.invoke(app, ["--db", db, *args], env={})
    assert result.exit_code == 0, result.output
    return result.output


def _real_tree(tmp_path: Path, db: str, agent_name: str) -> tuple[str, str]:
    """A root and a subagent child, each with a finished turn (with the example agent: a
    tool call and streamed chunks), then closed: ``(root, child)``."""
    agent = example_agent(tmp_path) if agent_name == "example" else noop_agent()
    with open_cp(tmp_path, db) as cp:
        root = cp.spawn(agent, tmp_path, "look around #tool #chunks=4")
        assert cp.wait(root.command.id, 60).state is CommandState.COMPLETED  # type: ignore[union-attr]
        child = cp.spawn(agent, tmp_path, "help #chunks=3", parent=root.session.id, announce=False)
        assert cp.wait(child.command.id, 60).state is CommandState.COMPLETED  # type: ignore[union-attr]
        cp.close_session(root.session.id)  # its descendants too
    return root.session.id, child.session.id


# The noop agent starts in a tenth of the example agent's time: the default run's variant.
@pytest.mark.parametrize("agent_name", [pytest.param("example", marks=pytest.mark.full), "noop"])
def test_archive_round_trip_of_a_real_tree(tmp_path: Path, db: str, agent_name: str) -> None:
    root, child = _real_tree(tmp_path, db, agent_name)
    exported = {}
    for sid in (root, child):
        _run(db, "sessions", "export", sid, "-o", str(tmp_path / f"{sid}.export.jsonl"))
        exported[sid] = (tmp_path / f"{sid}.export.jsonl").read_bytes()
    stored = {
        sid: query(
            db,
            "SELECT id, seq, command_id, kind, payload, created_at FROM events "
            "WHERE session_id = ? ORDER BY seq",
            (sid,),
        )
        for sid in (root, child)
    }
    commands = {
        sid: query(db, "SELECT id FROM commands WHERE session_id = ? ORDER BY seq", (sid,))
        for sid in (root, child)
    }
    archive_dir = tmp_path / "archive"

    report = json.loads(
        _run(db, "gc", "--older-than", "0s", "--archive", str(archive_dir), "--json")
    )

    (tree,) = report["deleted"]
    assert tree["root"] == root and tree["sessions"] == [root, child]
    target = archive_dir / f"{root}.tar.gz"
    assert tree["archive"]["path"] == str(target)
    assert tree["archive"]["sha256"] == hashlib.sha256(target.read_bytes()).hexdigest()
    assert all_gone(db, [root, child])
    # sha256sum itself agrees with the checksum file.
    check = subprocess.run(
        ["sha256sum", "-c", f"{root}.tar.gz.sha256"],
        cwd=archive_dir,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0 and check.stdout.strip() == f"{root}.tar.gz: OK", check
    # Nothing left behind but the archive and its checksum.
    assert sorted(p.name for p in archive_dir.iterdir()) == [
        f"{root}.tar.gz",
        f"{root}.tar.gz.sha256",
    ]

    with tarfile.open(target, "r:gz") as tar:
        names = tar.getnames()
        members = {n: tar.extractfile(n).read() for n in names}  # type: ignore[union-attr]
    assert names == [
        "manifest.json",
        *(
            f"{sid}.{kind}.jsonl"
            for sid in (root, child)
            for kind in ("transcript", "events", "commands")
        ),
    ]
    manifest: dict[str, Any] = json.loads(members["manifest.json"])
    assert manifest["format"] == "acpctl-gc-archive" and manifest["version"] == 1
    assert manifest["root"] == root
    assert manifest["store"]["id"] == _identity(db)
    assert [(s["id"], s["parentId"]) for s in manifest["sessions"]] == [(root, None), (child, root)]
    for member in manifest["members"]:
        body = members[member["name"]]
        assert hashlib.sha256(body).hexdigest() == member["sha256"]
        assert len(body) == member["bytes"]
    for sid in (root, child):
        assert members[f"{sid}.transcript.jsonl"] == exported[sid]
        lines = [json.loads(x) for x in members[f"{sid}.events.jsonl"].decode().splitlines()]
        assert [
            (e["id"], e["seq"], e["command_id"], e["kind"], e["payload"], e["created_at"])
            for e in lines
        ] == [(i, q, c, k, json.loads(p), t) for i, q, c, k, p, t in stored[sid]]
        archived = [json.loads(x) for x in members[f"{sid}.commands.jsonl"].decode().splitlines()]
        assert [c["id"] for c in archived] == [c for (c,) in commands[sid]]
        assert all(c["state"] == "completed" and c["result"] is not None for c in archived)


def _identity(db: str) -> str:
    with Store.open(db) as store:
        return store.identity


def test_an_archive_that_cannot_be_written_keeps_its_tree(tmp_path: Path, db: str) -> None:
    """The archive directory passes the check, then a tree's archive fails (its name is
    taken by a directory): that tree stays whole, the others go; exit 1."""
    archive_dir = tmp_path / "archive"
    with Store.open(db) as s:
        blocked = make_session(s, "closed", events=3)
        fine = make_session(s, "closed", events=3)
    (archive_dir / f"{blocked}.tar.gz").mkdir(parents=True)

    result = runner.invoke(
        app, ["--db", db, "gc", "--older-than", "0s", "--archive", str(archive_dir), "--json"]
    )

    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert [t["root"] for t in report["deleted"]] == [fine]
    (failed,) = report["failed"]
    assert failed["root"] == blocked and "archive" in failed["error"]
    assert all_gone(db, [fine]) and not all_gone(db, [blocked])
    assert query(db, "SELECT count(*) FROM events WHERE session_id = ?", (blocked,)) == [(5,)]
    # No temporary file or half-made archive left behind.
    assert sorted(p.name for p in archive_dir.iterdir()) == sorted(
        [f"{blocked}.tar.gz", f"{fine}.tar.gz", f"{fine}.tar.gz.sha256"]
    )


def test_a_stop_asked_while_archiving_leaves_nothing(tmp_path: Path, db: str) -> None:
    """A closing process does not wait for a big tree's archive: the part written goes,
    and the tree is untouched for the next pass."""
    with Store.open(db) as s:
        root = make_session(s, "closed", events=10)
        verdict = s.read(
            lambda c: judge_tree(c, root, RetentionRule(frozenset({"closed"}), 2e9), this_owner())
        )
        assert verdict is not None and verdict.kept is None
        stop = threading.Event()
        stop.set()
        with pytest.raises(ArchiveStopped):
            write_archive(s, verdict, tmp_path, stop)
    left = [p.name for p in tmp_path.iterdir() if not p.name.startswith("cp.db")]
    assert left == [], left
    assert not all_gone(db, [root])
