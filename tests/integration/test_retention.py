"""``acpctl gc``: exactly the chosen trees go, whole; what is kept says why; a dry run and
bad input change nothing; sinks that have not received a tree's output keep it unless
forced. On both backends, through the command line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from control_plane.cli import app
from store import Store
from store.ownership import _owner_of, this_owner
from tests.conftest import AGENT
from tests.support.direct_sql import execute, query
from tests.support.retention_trees import all_gone, backdate, consistent, make_session, remaining

runner = CliRunner()
HOUR = 3600.0


def gc(db: str, *args: str) -> tuple[int, dict[str, Any] | str]:
    """``acpctl gc ARGS --json``: the exit code and the report (or the output on error)."""
    result = runner.invoke(app, ["--db", db, "gc", *args, "--json"], env={})
    if result.exit_code != 0 and not result.output.lstrip().startswith("{"):
        return result.exit_code, result.output
    return result.exit_code, json.loads(result.output)


def _table_counts(db: str) -> dict[str, int]:
    tables = ("sessions", "events", "commands", "bindings", "delivery_checkpoints")
    return {t: int(query(db, f"SELECT count(*) FROM {t}")[0][0]) for t in tables}


def test_gc_deletes_exactly_the_chosen_trees_and_says_why_the_others_stay(db: str) -> None:
    with Store.open(db) as s:
        # Deleted: a closed tree (root and child), and an error root.
        a = make_session(s, "idle", events=30)
        a_child = make_session(s, "closed", parent=a, events=20)
        s.close_session(a)
        c = make_session(s, "error", events=5)
        # Kept: a child idle (not chosen), a child updated recently, a child in a turn, a
        # queued prompt, an owner that lives.
        b = make_session(s, "idle")
        b_child = make_session(s, "idle", parent=b)
        s.close_session(b)
        f = make_session(s, "idle")
        f_child = make_session(s, "closed", parent=f)
        s.close_session(f)
        g = make_session(s, "idle")
        g_child = make_session(s, "running", parent=g)
        s.close_session(g)
        h = make_session(s, "error", prompt=True)
        i = make_session(s, "closed")
        # Not considered at all: an idle root (by default), a recent closed root.
        d = make_session(s, "idle")
        e = make_session(s, "closed")
    old = [a, a_child, c, b, b_child, f, g, g_child, h, i, d]
    backdate(db, old, 2 * HOUR)
    execute(db, "UPDATE sessions SET owner = ? WHERE id = ?", (this_owner(), i))
    kept_before = remaining(db, [b, b_child, f, f_child, g, g_child, h, i, d, e])

    code, report = gc(db, "--older-than", "1h")

    assert code == 0, report
    assert isinstance(report, dict)
    assert {t["root"] for t in report["deleted"]} == {a, c}
    assert {tuple(t["sessions"]) for t in report["deleted"]} == {(a, a_child), (c,)}
    assert {t["root"]: t["events"] for t in report["deleted"]} == {a: 54, c: 6}
    reasons = {k["root"]: k["reason"] for k in report["kept"]}
    assert reasons == {b: "state", f: "recent", g: "busy", h: "queued", i: "owned"}
    assert all_gone(db, [a, a_child, c])
    assert remaining(db, [b, b_child, f, f_child, g, g_child, h, i, d, e]) == kept_before
    assert consistent(db) == []

    # Asked for idle too: the idle root goes, and the tree with an idle child.
    code, report = gc(db, "--older-than", "1h", "--state", "idle,closed")
    assert code == 0, report
    assert isinstance(report, dict)
    assert {t["root"] for t in report["deleted"]} == {b, d}
    assert all_gone(db, [b, b_child, d])
    assert consistent(db) == []


def test_a_dry_run_reports_and_changes_nothing(db: str, tmp_path: Path) -> None:
    with Store.open(db) as s:
        root = make_session(s, "idle", events=10)
        make_session(s, "closed", parent=root, events=10)
        s.close_session(root)
    before = _table_counts(db)
    archive = tmp_path / "archive"

    code, report = gc(db, "--older-than", "0s", "--archive", str(archive), "--dry-run")

    assert code == 0, report
    assert isinstance(report, dict) and report["dryRun"]
    assert [t["root"] for t in report["deleted"]] == [root]
    assert report["transactions"]["count"] == 0
    assert _table_counts(db) == before
    assert not archive.exists()


def test_a_tree_whose_sink_lags_is_kept_until_forced(db: str, tmp_path: Path) -> None:
    sink = tmp_path / "sink.jsonl"
    with Store.open(db) as s:
        root = make_session(s, "idle", events=3)
        child = make_session(s, "closed", parent=root, events=4, sink=sink, delivered=False)
        s.close_session(root)
        delivered = make_session(s, "closed", events=2, sink=tmp_path / "done.jsonl")

    code, report = gc(db, "--older-than", "0s")

    assert code == 0 and isinstance(report, dict)
    assert [t["root"] for t in report["deleted"]] == [delivered]
    (kept,) = report["kept"]
    assert kept["root"] == root and kept["reason"] == "undelivered"
    (lag,) = kept["undelivered"]
    assert lag["session"] == child and lag["target"] == str(sink)
    assert (lag["delivered"], lag["last"]) == (0, 6)
    assert str(sink) in kept["detail"]
    assert not all_gone(db, [root, child])

    code, report = gc(db, "--older-than", "0s", "--force")

    assert code == 0 and isinstance(report, dict)
    (forced,) = report["deleted"]
    assert forced["root"] == root and forced["forced"]
    assert all_gone(db, [root, child])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--older-than", "3x"], "not a duration"),
        (["--older-than", "-1d"], "not a duration"),
        (["--older-than", "30"], "not a duration"),  # a unit is needed
        (["--state", "running"], "never deleted"),
        (["--state", "closed,bogus"], "unknown state"),
        (["--state", ","], "at least one"),
        (["--archive", "{tmp}/a-file/archive"], "not writable"),
    ],
)
def test_bad_input_exits_2_and_deletes_nothing(
    db: str, tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    with Store.open(db) as s:
        make_session(s, "closed", events=5)
    before = _table_counts(db)

    code, output = gc(db, *[a.replace("{tmp}", str(tmp_path)) for a in args])

    assert code == 2, output
    assert isinstance(output, str) and message in output and "Traceback" not in output
    assert _table_counts(db) == before


def test_a_bad_retention_section_exits_2(db: str, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[retention]\nolder_than = "soon"\n')
    Store.open(db).close()
    result = runner.invoke(app, ["--config", str(config), "--db", db, "gc"], env={})
    assert result.exit_code == 2
    assert "retention.older_than" in result.output and "not a duration" in result.output


def test_the_retention_section_gives_gc_its_defaults(db: str, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    archive = tmp_path / "from-config"
    config.write_text(
        f'[retention]\nolder_than = "0s"\nstates = ["idle"]\narchive_dir = "{archive}"\n'
    )
    with Store.open(db) as s:
        idle = make_session(s, "idle", events=2)
        closed = make_session(s, "closed")
    result = runner.invoke(app, ["--config", str(config), "--db", db, "gc", "--json"], env={})
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["states"] == ["idle"] and report["olderThan"] == "0s"
    assert [t["root"] for t in report["deleted"]] == [idle]
    assert (archive / f"{idle}.tar.gz").exists()
    assert all_gone(db, [idle]) and not all_gone(db, [closed])


def test_a_tree_a_live_gc_claimed_is_left_to_it_and_a_dead_ones_is_finished(db: str) -> None:
    with Store.open(db) as s:
        root = make_session(s, "closed", events=3)
    other_gc = subprocess.Popen(["sleep", "60"])  # stands for another gc process, alive
    try:
        mark = {"by": _owner_of(other_gc.pid), "since": 0, "state": "closed", "archive": None}
        execute(
            db,
            "UPDATE sessions SET metadata = ? WHERE id = ?",
            (json.dumps({"retentionClaim": mark}), root),
        )

        code, report = gc(db)  # the default age: a claimed tree comes back whatever its age

        assert code == 0 and isinstance(report, dict)
        assert report["deleted"] == []
        assert [(k["root"], k["reason"]) for k in report["kept"]] == [(root, "claimed")]
    finally:
        other_gc.kill()
        other_gc.wait()

    code, report = gc(db)  # its claimant is gone: taken over and finished

    assert code == 0 and isinstance(report, dict)
    (tree,) = report["deleted"]
    assert tree["root"] == root and tree["resumed"]
    assert all_gone(db, [root])


def test_a_callers_own_metadata_key_is_not_taken_for_a_claim(db: str) -> None:
    """Spawn metadata is the caller's: a key named like the claim's mark, without its shape,
    leaves the session to the ordinary rule (here: too recent to go)."""
    with Store.open(db) as s:
        root = s.spawn(AGENT, "/tmp", metadata={"retentionClaim": {"by": 1}}).session.id
        s.close_session(root)

    code, report = gc(db)

    assert code == 0 and isinstance(report, dict)
    assert report["deleted"] == [] and report["kept"] == []
    assert not all_gone(db, [root])


def test_an_imported_transcript_is_kept_unless_asked_and_its_search_docs_go_with_it(
    db: str, tmp_path: Path
) -> None:
    """Imported sessions are closed and age from their import: kept (reason ``imported``)
    until ``--include-imported``; their search documents are deleted with them."""
    from control_plane.importing import import_transcript

    example = Path(__file__).parents[1] / "golden" / "transcript-v3-example.jsonl"
    with Store.open(db) as s:
        imported = import_transcript(s, example).session.id
    backdate(db, [imported], 2 * HOUR)
    assert query(db, "SELECT count(*) FROM search_docs WHERE session_id = ?", (imported,))[0][0]

    code, report = gc(db, "--older-than", "1h")
    assert code == 0 and isinstance(report, dict)
    assert [(k["root"], k["reason"]) for k in report["kept"]] == [(imported, "imported")]
    assert remaining(db, [imported])

    code, report = gc(db, "--older-than", "1h", "--include-imported")
    assert code == 0 and isinstance(report, dict)
    assert [t["root"] for t in report["deleted"]] == [imported]
    assert all_gone(db, [imported])
    assert query(db, "SELECT count(*) FROM search_docs")[0][0] == 0
    assert consistent(db) == []
