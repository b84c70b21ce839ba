"""A workspace checkpoint's cost (``actors/workspace/checkpoint.py``): the worktree's files
committed to a hidden ref with a temporary index, at a turn's end.

A real git repository of ``--files`` files (default 10,000, in 100 directories) with a
worktree; each round changes ``--changed`` files (default 10: 5 edited, 5 new) and then, in
alternating order:

- ``checkpoint``: ``take_checkpoint`` (copy the index, ``git add -A``, ``write-tree``,
  ``commit-tree``, ``update-ref``);
- ``floor``: ``git status --porcelain`` on the same worktree, the least any look at what
  changed costs (git reads every file's stat, as ``add -A`` does).

Target: a checkpoint at most 150 ms. The ratio to the floor says what the checkpoint adds
to git's own scan on this machine.

    python bench/checkpoint.py [--files 10000] [--changed 10] [--rounds 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:
    sys.path.insert(0, _REPO_ROOT)

from actors.workspace import ensure_worktree, plan_worktree, take_checkpoint  # noqa: E402
from bench._common import machine_info, median, percentile, positive_int, progress  # noqa: E402

MAX_CHECKPOINT_MS = 150.0


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def make_repo(root: Path, files: int) -> Path:
    repo = root / "repo"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    for i in range(files):
        d = repo / f"d{i % 100:02d}"
        d.mkdir(exist_ok=True)
        (d / f"f{i}.txt").write_text(f"file {i}\n" * 8)
    _git("add", "-A", cwd=repo)
    _git("-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "init", cwd=repo)
    return repo


def change(worktree: Path, round_no: int, changed: int) -> None:
    for k in range(changed // 2):
        path = worktree / f"d{k:02d}" / f"f{k}.txt"
        path.write_text(path.read_text() + f"round {round_no}\n")
    for k in range(changed - changed // 2):
        (worktree / f"new-{round_no}-{k}.txt").write_text(f"new {round_no} {k}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=positive_int, default=10_000)
    parser.add_argument("--changed", type=positive_int, default=10)
    parser.add_argument("--rounds", type=positive_int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="acpctl-bench-ckpt-") as tmp:
        root = Path(tmp)
        progress(f"making a repository of {args.files} files")
        repo = make_repo(root, args.files)
        spec = plan_worktree(str(repo), "bench", str(root / "workspaces"))
        ensure_worktree(spec, str(root / "setup.log"), 60)
        worktree = Path(spec.path)
        parent = take_checkpoint(spec, "bench", 0).commit  # the worktree as made
        sides: dict[str, list[float]] = {"checkpoint": [], "floor": []}
        for n in range(1, args.rounds + 1):
            change(worktree, n, args.changed)
            order = ["checkpoint", "floor"] if n % 2 else ["floor", "checkpoint"]
            for side in order:
                started = time.perf_counter()
                if side == "checkpoint":
                    parent = take_checkpoint(spec, "bench", n, parent).commit
                else:
                    _git("status", "--porcelain", cwd=worktree)
                sides[side].append((time.perf_counter() - started) * 1000)
            progress(f"round {n}: checkpoint {sides['checkpoint'][-1]:.1f} ms")
    ckpt, floor = median(sides["checkpoint"]), median(sides["floor"])
    result: dict[str, Any] = {
        "files": args.files,
        "changed": args.changed,
        "rounds": args.rounds,
        "checkpoint_ms_p50": round(ckpt, 1),
        "checkpoint_ms_p90": round(percentile(sides["checkpoint"], 90), 1),
        "floor_git_status_ms_p50": round(floor, 1),
        "checkpoint_vs_floor": round(ckpt / floor, 2) if floor else None,
        "target_ms": MAX_CHECKPOINT_MS,
        "target_met": ckpt <= MAX_CHECKPOINT_MS,
        "machine": machine_info(),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"checkpoint of {args.changed} changed files in {args.files}: p50 {ckpt:.1f} ms "
        f"(p90 {result['checkpoint_ms_p90']} ms), target <= {MAX_CHECKPOINT_MS:g} ms: "
        f"{'met' if result['target_met'] else 'NOT met'}; floor (git status) p50 "
        f"{floor:.1f} ms, ratio {result['checkpoint_vs_floor']}x"
    )


if __name__ == "__main__":
    main()
