"""What keeping the search index costs a turn (store/ops/search_index.py).

The index is written in the transaction of the event that ends a turn: that transaction
also reads the turn's ``session_update`` frames back and inserts one document (and, on
SQLite, its FTS5 rows by trigger). Measured on a real store, in one process, interleaved
round by round:

- ``end indexed``: the transaction appending a turn's ``turn_ended`` after ``--updates``
  streamed updates (default 100), as the store does;
- ``end unindexed``: the same transaction with the index hook switched off for that round
  (the baseline: what ending a turn cost before the index);
- ``prompt indexed`` / ``prompt unindexed``: the same for the ``prompt`` event;
- ``example turn``: a whole turn of the example agent (``#updates=N``) through a
  ``ControlPlane`` on the same kind of store, for scale.

Prints each side's p50, the difference, and the difference as a share of a whole turn.

    python bench/search_index_cost.py [--updates 100] [--rounds 60] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:
    sys.path.insert(0, _REPO_ROOT)

import store.ops.events as event_ops  # noqa: E402
import store.ops.search_index as search_index  # noqa: E402
from bench._common import example_agent_argv, machine_info, median, positive_int  # noqa: E402
from control_plane import ControlPlane  # noqa: E402
from state_machines.event_kinds import EventKind  # noqa: E402
from store import AgentSpec, CommandKind, NewEvent, Store  # noqa: E402
from store.synthetic import _chunk  # noqa: E402

INDEXED = search_index.INDEXED_KINDS


def _turn_rows(store: Store, sid: str, updates: int, indexed: bool) -> tuple[float, float]:
    """One synthetic turn: (prompt event ms, turn end ms), with the hook on or off."""
    payload = {"content": [{"type": "text", "text": "go on"}]}
    cid = store.enqueue(sid, CommandKind.PROMPT, payload).command.id
    search_index.INDEXED_KINDS = INDEXED if indexed else frozenset()
    try:
        prompt = NewEvent(
            EventKind.PROMPT, {"commandId": cid, "content": [{"type": "text", "text": "go on"}]}
        )
        started = time.perf_counter()
        store.append_events(sid, cid, [prompt])
        prompt_ms = (time.perf_counter() - started) * 1000
        frames = [
            ("session_update", _chunk(sid, f"word{i} of the answer "), None) for i in range(updates)
        ]
        store.write(lambda ctx: event_ops.append_frames(ctx, sid, cid, frames))
        end = NewEvent(EventKind.TURN_ENDED, {"commandId": cid, "stopReason": "end_turn"})
        started = time.perf_counter()
        store.append_events(sid, cid, [end])
        return prompt_ms, (time.perf_counter() - started) * 1000
    finally:
        search_index.INDEXED_KINDS = INDEXED


def run(args: argparse.Namespace) -> dict[str, Any]:
    times: dict[str, list[float]] = {
        k: []
        for k in (
            "prompt indexed",
            "prompt unindexed",
            "end indexed",
            "end unindexed",
            "example turn",
        )
    }
    with tempfile.TemporaryDirectory(prefix="acpctl-index-cost-") as tmp:
        work = Path(tmp)
        store = Store.open(work / "rows.db")
        spawned = store.spawn(AgentSpec("bench", ("true",)), str(work))
        sid = spawned.session.id
        agent = AgentSpec("example", tuple(example_agent_argv(str(work / "agent-state.json"))))
        cp = ControlPlane.open(work / "turns.db")
        try:
            first = cp.spawn(agent, work, "warm up")
            assert first.command is not None
            cp.wait(first.command.id, 60)
            for round_no in range(args.rounds):
                for indexed in (round_no % 2 == 0, round_no % 2 == 1):  # alternate who goes first
                    p, e = _turn_rows(store, sid, args.updates, indexed)
                    side = "indexed" if indexed else "unindexed"
                    times[f"prompt {side}"].append(p)
                    times[f"end {side}"].append(e)
                started = time.perf_counter()
                turn = cp.prompt(first.session.id, f"#updates={args.updates} round {round_no}")
                cp.wait(turn.id, 60)
                times["example turn"].append((time.perf_counter() - started) * 1000)
        finally:
            cp.close()
            store.close()
    p50 = {k: median(v) for k, v in times.items()}
    added = (p50["prompt indexed"] - p50["prompt unindexed"]) + (
        p50["end indexed"] - p50["end unindexed"]
    )
    return {
        "updates": args.updates,
        "rounds": args.rounds,
        "p50_ms": p50,
        "added_per_turn_ms": added,
        "added_share_of_turn": added / p50["example turn"],
        "end_ratio": p50["end indexed"] / p50["end unindexed"],
        "machine": machine_info(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=positive_int, default=100)
    parser.add_argument("--rounds", type=positive_int, default=60)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name, value in result["p50_ms"].items():
        print(f"{name:<18} p50 {value:7.3f} ms")
    print(
        f"the index adds {result['added_per_turn_ms']:.3f} ms a turn "
        f"({100 * result['added_share_of_turn']:.1f}% of an example turn of "
        f"{args.updates} updates); turn end x{result['end_ratio']:.2f}"
    )


if __name__ == "__main__":
    main()
