"""What the fault loop checks once the faults clear, beyond the crash loop's invariants, each
failure with its own error type so that a bug the loop found once is named when it returns;
and the report of a failure (tests/crash/test_fault_loop.py).
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from control_plane import (
    CommandState,
    ControlPlane,
)
from tests.crash.test_crash_loop import (
    _log,
)
from tests.support.fault_injection import Warnings

FINAL = {CommandState.COMPLETED, CommandState.INTERRUPTED, CommandState.FAILED}


def state_report(cp: ControlPlane, warnings: Warnings, work_dir: Path, lives: int) -> str:
    lines = []
    for s in cp.list_sessions(limit=100):
        lines.append(
            f"session {s.spawn_key} {s.id} state={s.state} owner={s.owner} epoch={s.epoch}"
        )
        for c in cp.commands(s.id):
            if c.state not in FINAL:
                lines.append(f"  command {c.id} seq={c.seq} state={c.state} attempts={c.attempts}")
    lines.append(f"live actors: {cp.live_sessions()}")
    lines += [f"{t:.2f} {name}: {msg}" for t, name, msg in warnings.records[-40:]]
    for life in range(max(0, lives - 2), lives):
        lines.append(f"--- driver life {life} (tail)\n" + _log(work_dir, life)[-1500:])
    return "\n".join(lines)


def sink_ids(path: Path) -> tuple[list[int], int]:
    """The event ids in a JSONL sink file, in order, and how many lines are not JSON."""
    ids, torn = [], 0
    for line in path.read_bytes().splitlines():
        try:
            ids.append(int(json.loads(line)["eventId"]))
        except ValueError:
            torn += 1
    return ids, torn


class SinkCorrupted(AssertionError):
    """A JSONL sink file with a line that is not JSON, or an event twice."""


class ResentAfterOrderlyStop(AssertionError):
    """A prompt sent twice into one conversation after an orderly stop."""


def check_no_resend_after_refund(work_dir: Path) -> None:
    """Before ``check_invariants`` (whose ``prompt events == attempts`` catches it too): a
    command whose attempt an orderly stop gave back (its ``interrupted`` event says
    ``attempts: 0`` in stores before the fix) and that was then sent again, with its own type."""
    conn = sqlite3.connect(f"file:{work_dir / 'cp.db'}?mode=ro", uri=True)
    try:
        attempts = dict(conn.execute("SELECT id, attempts FROM commands").fetchall())
        rows = conn.execute(
            "SELECT command_id, kind, payload FROM events "
            "WHERE command_id IS NOT NULL AND kind IN ('prompt', 'interrupted')"
        ).fetchall()
    finally:
        conn.close()
    prompts: Counter[str] = Counter()
    refunded: set[str] = set()
    for command_id, kind, payload in rows:
        if kind == "prompt":
            prompts[command_id] += 1
        elif json.loads(payload).get("attempts") == 0:
            refunded.add(command_id)
    resent = sorted(c for c in refunded if prompts[c] > attempts[c])
    if resent:
        problem = ", ".join(f"{c}: {prompts[c]} prompts, attempts={attempts[c]}" for c in resent)
        print(f"fault-loop: a prompt sent twice into one conversation: {problem}")
        raise ResentAfterOrderlyStop(problem)


class PassivationRace(AssertionError):
    """The live process recovered a turn it was running itself."""


def check_actor_failures(warnings: Warnings, report: Callable[[], str]) -> None:
    """No session actor of the live process may fail to handle a message. A turn's end
    refused because the live process's own sweep had recovered that running turn as a dead
    owner's is the passivation race, with its own error type."""
    if not warnings.actor_failures:
        return
    failures = "\n".join(f"{kind}: {message}" for message, kind in warnings.actor_failures)
    if any(kind == "IllegalTransition" for _, kind in warnings.actor_failures):
        print(f"fault-loop: the passivation race is back: {failures}")
        raise PassivationRace(f"{failures}\n{report()}")
    raise AssertionError(f"{failures}\n{report()}")


def check_sinks(work_dir: Path) -> None:
    """What ``check_invariants`` checks of the sinks, first, with its own error type (so the
    sink bug is told apart from any other failure)."""
    for path in sorted((work_dir / "sinks").glob("*.jsonl")):
        ids, torn = sink_ids(path)
        twice = sorted(i for i, n in Counter(ids).items() if n > 1)
        if torn or twice:
            lines = path.read_bytes().splitlines()
            bad = [line[:120] for line in lines if not line.startswith(b"{")]
            problem = (
                f"{path.name}: {len(lines)} lines, {torn} not JSON {bad}, "
                f"{len(twice)} events twice (ids {twice[:10]}...)"
            )
            print(f"fault-loop: a sink file torn or with events twice: {problem}")
            raise SinkCorrupted(problem)
