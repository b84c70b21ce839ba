"""Part (c) of bench/actors.py: ``ControlPlane.open`` on a store with a backlog (10,000
sessions and 20,000 queued commands by default), built through the store's write API, then
opened with an agent that never answers: open() to return, to the first slot grant, and its
phases, timed by wrapping the methods in this process."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

from actors.settings import RuntimeSettings
from actors.supervisor import Supervisor
from bench._common import median, now, progress, spread
from control_plane import ControlPlane
from protocol.agent.permissions import Decision, PermissionPolicy
from store import AgentSpec, CommandKind, Store, StoreOptions, ops
from store.schema import commands, sessions

OPEN_MAX_RUNNING = 2
PROMPT = "Summarise the open pull requests in this repository."


def runtime_settings(workdir: str, max_running: int, passivate_after_s: float | None) -> Any:
    settings = replace(
        RuntimeSettings(),
        max_running_turns=max_running,
        permission_policy=PermissionPolicy(Decision.ALLOW),
        log_dir=os.path.join(workdir, "agent-logs"),
    )
    if passivate_after_s is not None:
        settings = replace(settings, passivate_after_s=passivate_after_s)
    return settings


def build_backlog(path: str, cwd: str, n_sessions: int, n_commands: int) -> float:
    """Sessions each spawned with a prompt, then extra prompts round-robin until
    ``n_commands`` are queued; a few hundred sessions per transaction. Returns seconds."""
    agent = AgentSpec("never-ready", ("sleep", "600"))
    blocks = [{"type": "text", "text": PROMPT}]
    payload = {"content": blocks}
    start = now()
    store = Store.open(path)
    try:
        ids: list[str] = []
        batch = 250

        def spawn_many(k: int) -> Callable[[Any], list[str]]:
            def write(ctx: Any) -> list[str]:
                return [ops.spawn(ctx, agent, cwd, None, blocks, None).session.id for _ in range(k)]

            return write

        while len(ids) < n_sessions:
            ids += store.write(spawn_many(min(batch, n_sessions - len(ids))))
        extra = max(0, n_commands - len(ids))
        targets = [ids[i % len(ids)] for i in range(extra)] if ids else []
        for i in range(0, len(targets), batch * 2):
            chunk = targets[i : i + batch * 2]

            def enqueue_many(ctx: Any, chunk: list[str] = chunk) -> None:
                for sid in chunk:
                    ops.enqueue(ctx, sid, CommandKind.PROMPT, payload, None)

            store.write(enqueue_many)
    finally:
        store.close()
    return now() - start


@dataclass
class OpenRun:
    open_seconds: float
    first_grant_seconds: float
    phases: dict[str, float]
    rediscover_seconds: float
    waiting_after_open: int
    activations: int
    close_seconds: float


@contextlib.contextmanager
def _timed_methods(t0: list[float], marks: dict[str, float]) -> Iterator[None]:
    """Wrap a few methods to record when they ran (relative to ``t0[0]``). Restored after."""
    originals: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, name: str, label: str, first_only: bool = False) -> None:
        original = owner.__dict__[name]
        func = original.__func__ if isinstance(original, classmethod) else original

        def timed(*args: Any, **kwargs: Any) -> Any:
            begin = now()
            try:
                return func(*args, **kwargs)
            finally:
                if not (first_only and f"{label}_at" in marks):
                    marks[f"{label}_at"] = begin - t0[0]
                    marks[f"{label}_s"] = now() - begin

        setattr(owner, name, classmethod(timed) if isinstance(original, classmethod) else timed)
        originals.append((owner, name, original))

    wrap(Store, "open", "store_open", first_only=True)
    wrap(Store, "recover", "recover", first_only=True)
    wrap(Supervisor, "_discover", "discover", first_only=True)
    wrap(Supervisor, "_granted", "first_grant", first_only=True)
    try:
        yield
    finally:
        for owner, name, original in reversed(originals):
            setattr(owner, name, original)


def run_open(workdir: str, pristine: str, round_no: int) -> OpenRun:
    run_dir = os.path.join(workdir, f"open-{round_no}")
    os.makedirs(run_dir)
    path = os.path.join(run_dir, "cp.db")
    shutil.copyfile(pristine, path)
    settings = replace(
        runtime_settings(run_dir, OPEN_MAX_RUNNING, None),
        agent_start_timeout_s=2.0,
        agent_shutdown_timeout_s=0.5,
    )
    marks: dict[str, float] = {}
    t0 = [0.0]
    cp: ControlPlane | None = None
    try:
        with _timed_methods(t0, marks):
            t0[0] = now()
            cp = ControlPlane.open(path, settings=settings)
            opened = now() - t0[0]
            while "first_grant_at" not in marks and now() - t0[0] < 60:
                time.sleep(0.001)
        waiting = cp._supervisor.slots.waiting
        begin = now()
        cp._supervisor._discover()  # what the sweep thread repeats every sweep_interval_s
        rediscover = now() - begin
        activations = cp._supervisor.activations
        close_start = now()
        cp.close()
        close_seconds = now() - close_start
    finally:
        if cp is not None:
            cp.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    phases = {
        "store_open_s": marks.get("store_open_s", float("nan")),
        "recover_s": marks.get("recover_s", float("nan")),
        "discover_s": marks.get("discover_s", float("nan")),
    }
    return OpenRun(
        open_seconds=opened,
        first_grant_seconds=marks.get("first_grant_at", float("nan")),
        phases=phases,
        rediscover_seconds=rediscover,
        waiting_after_open=waiting,
        activations=activations,
        close_seconds=close_seconds,
    )


def part_c(workdir: str, n_sessions: int, n_commands: int, rounds: int) -> dict[str, Any]:
    pristine = os.path.join(workdir, "backlog.db")
    cwd = os.path.join(workdir, "backlog-work")
    os.makedirs(cwd, exist_ok=True)
    progress(f"(c) building a store: {n_sessions} sessions, {n_commands} queued commands")
    build_s = build_backlog(pristine, cwd, n_sessions, n_commands)
    store = Store.open(pristine, StoreOptions())
    try:
        from sqlalchemy import func, select

        queued = store.read(
            lambda c: c.execute(
                select(func.count()).select_from(commands).where(commands.c.state == "queued")
            ).scalar_one()
        )
        n_rows = store.read(
            lambda c: c.execute(select(func.count()).select_from(sessions)).scalar_one()
        )
    finally:
        store.close()
    size_mb = os.path.getsize(pristine) / (1024 * 1024)
    progress(f"  built in {build_s:.1f} s: {n_rows} sessions, {queued} queued, {size_mb:.1f} MiB")
    runs: list[OpenRun] = []
    for r in range(rounds):
        run = run_open(workdir, pristine, r)
        runs.append(run)
        progress(
            f"(c) round {r + 1}/{rounds}: open {run.open_seconds * 1000:.0f} ms, first grant "
            f"{run.first_grant_seconds * 1000:.0f} ms, phases "
            + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in run.phases.items())
            + f", rediscover {run.rediscover_seconds * 1000:.0f} ms, close "
            f"{run.close_seconds:.1f} s"
        )
    return {
        "sessions": int(n_rows),
        "queued_commands": int(queued),
        "build_seconds": build_s,
        "file_mib": size_mb,
        "max_running_turns": OPEN_MAX_RUNNING,
        "runs": [asdict(r) for r in runs],
        "median_open_ms": median([r.open_seconds * 1000 for r in runs]),
        "median_first_grant_ms": median([r.first_grant_seconds * 1000 for r in runs]),
        "median_phase_ms": {k: median([r.phases[k] * 1000 for r in runs]) for k in runs[0].phases},
        "median_rediscover_ms": median([r.rediscover_seconds * 1000 for r in runs]),
        "min_max_open_ms": spread([r.open_seconds * 1000 for r in runs]),
        "max_activations": max(r.activations for r in runs),
        "median_close_s": median([r.close_seconds for r in runs]),
    }
