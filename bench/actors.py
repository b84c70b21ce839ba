"""The actor runtime end to end: sessions through ``ControlPlane`` with real agent processes.

What is measured
----------------
(a) *Example agent*: ``--sessions`` sessions (default 1000), each spawned with one prompt
    through ``ControlPlane.spawn``, run with ``max_running_turns`` 16 and 64 (``--concurrency``)
    against the bundled example agent (one agent process per session; starting one costs
    ~1.3-1.9 s of CPU, mostly importing ``acp.schema``). Figures: commands/s from the first
    spawn to the last command reaching a final state, final states, peak RSS of the control
    plane process and of its children (sampled from /proc), peak live agents and open fds,
    and how long ``close()`` takes afterwards. On a 2-core machine 1000 sessions cost ~25 min
    of CPU per concurrency, and with the product's default passivation (300 s) every agent
    stays alive (~40 MiB each): scale down with ``--sessions``.

(b) *No-op agent*: the same with a ~40-line raw JSON-RPC stdio agent (no ``acp`` import,
    ``python -I -S``) that answers ``initialize``, ``session/new`` and ``session/prompt``
    (one ``agent_message_chunk``, then ``end_turn``) at once, so what is left is the control
    plane's own cost per session (activation, ownership, agent spawn, 3 RPCs, the turn's
    transactions). Repeated ``--rounds`` times, interleaved with the store benchmark's figure
    (``bench/store_throughput.py``'s ``run_control_plane``: enqueue -> claim_next -> complete
    with as many submitter threads as ``max_running_turns``), measured inline in this process.

(c) *Open with a backlog*: a store with ``--open-sessions`` sessions (default 10,000) and
    ``--open-commands`` queued commands (default 20,000: the spawn's prompt plus one more per
    session), built directly through the store's write API (a few hundred sessions per
    transaction). Then ``ControlPlane.open`` with ``max_running_turns=2`` and an agent that
    never answers (``sleep``; ``agent_start_timeout_s=2``), so no work runs; measured: open()
    to return, open() to the supervisor's first slot grant, and phases (Store.open with its
    integrity check, recovery, discovery, the first grant), plus the cost of one more
    discovery pass (what the sweep thread repeats every ``sweep_interval_s``), then close at
    once. Phases are timed by wrapping the methods in this process (the code is not changed).
    Each round opens a fresh copy of the built file.

Run from the repository root::

    python bench/actors.py --quick                 # smoke variant, ~1-2 min
    python bench/actors.py --sessions 64 --noop-sessions 300   # ~10 min on 2 cores
    python bench/actors.py --parts b,c --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != _REPO_ROOT:  # ahead of bench/ itself, whose actors.py is not the package
    sys.path.insert(0, _REPO_ROOT)

from actors.settings import RuntimeSettings  # noqa: E402
from bench._common import (  # noqa: E402
    machine_info,
    median,
    now,
    peak_rss_mb,
    positive_int,
    positive_int_list,
    progress,
    spread,
)
from bench.actors_open import PROMPT, part_c, runtime_settings  # noqa: E402
from bench.proc_sampling import Monitor, Peaks  # noqa: E402
from bench.store_throughput import run_control_plane  # noqa: E402
from control_plane import ControlPlane  # noqa: E402
from protocol.example_agent import noop as noop_agent  # noqa: E402
from store import (  # noqa: E402
    AgentSpec,
    Store,
)
from store.schema import commands  # noqa: E402

EXAMPLE = AgentSpec("example-agent", (sys.executable, "-m", "protocol.example_agent"))
DEFAULT_SESSIONS = 1000
DEFAULT_CONCURRENCY = (16, 64)
DEFAULT_ROUNDS = 3
DEFAULT_OPEN_SESSIONS = 10_000
DEFAULT_OPEN_COMMANDS = 20_000
STORE_COMMANDS = 640

# -- (a) and (b): sessions through the control plane ---------------------------------------


@dataclass
class SessionsRun:
    agent: str
    max_running_turns: int
    sessions: int
    seconds: float
    submit_seconds: float
    states: dict[str, int]
    activations: int
    slot_peak: int
    close_seconds: float
    peaks: Peaks = field(default_factory=Peaks)

    @property
    def rate(self) -> float:
        return self.sessions / self.seconds if self.seconds > 0 else float("nan")


def _command_states(store: Store) -> dict[str, int]:
    from sqlalchemy import func, select

    rows = store.read(
        lambda c: c.execute(select(commands.c.state, func.count()).group_by(commands.c.state)).all()
    )
    return {str(state): int(count) for state, count in rows}


def run_sessions(
    workdir: str,
    agent: AgentSpec,
    label: str,
    count: int,
    max_running: int,
    passivate_after_s: float | None,
    timeout_s: float,
    submitters: int = 8,
) -> SessionsRun:
    run_dir = tempfile.mkdtemp(prefix=f"{label}-{max_running}-", dir=workdir)
    cwd = os.path.join(run_dir, "work")
    os.makedirs(cwd)
    settings = runtime_settings(run_dir, max_running, passivate_after_s)
    cp = ControlPlane.open(os.path.join(run_dir, "cp.db"), settings=settings)
    close_seconds = float("nan")
    try:
        with Monitor() as monitor:
            start = now()
            with ThreadPoolExecutor(submitters, thread_name_prefix="bench-spawn") as pool:
                spawned = list(
                    pool.map(
                        lambda i: cp.spawn(agent, cwd, PROMPT, idempotency_key=f"{label}-{i}"),
                        range(count),
                    )
                )
            submitted = now() - start
            # Each command's end comes from the commit that finishes it (a wait reads the
            # command once, then is told): the last one's end is the run's end.
            for done, result in enumerate(spawned):
                assert result.command is not None
                while True:
                    elapsed = now() - start
                    if elapsed > timeout_s:
                        raise TimeoutError(
                            f"{label} x{max_running}: {done}/{count} commands final "
                            f"after {elapsed:.0f} s"
                        )
                    try:
                        cp.wait(result.command.id, timeout=min(15.0, timeout_s - elapsed))
                        break
                    except TimeoutError:
                        progress(
                            f"  {label} x{max_running}: {done}/{count} final after "
                            f"{now() - start:.0f} s, {cp._supervisor.slots.running} running, "
                            f"{monitor.peaks.children} agents at peak"
                        )
            seconds = now() - start
            states = _command_states(cp._store)
            activations = cp._supervisor.activations
            slot_peak = cp._supervisor.slots.peak
            close_start = now()
            cp.close()
            close_seconds = now() - close_start
    finally:
        cp.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    return SessionsRun(
        agent=label,
        max_running_turns=max_running,
        sessions=count,
        seconds=seconds,
        submit_seconds=submitted,
        states=states,
        activations=activations,
        slot_peak=slot_peak,
        close_seconds=close_seconds,
        peaks=monitor.peaks,
    )


def _describe(run: SessionsRun) -> str:
    mib = 1024 * 1024
    return (
        f"{run.agent} x{run.max_running_turns}: {run.sessions} sessions in {run.seconds:.1f} s "
        f"= {run.rate:,.1f} cmd/s, states {run.states}, peak {run.peaks.children} agents, "
        f"RSS own {run.peaks.own_rss / mib:.0f} MiB + children {run.peaks.children_rss / mib:.0f} "
        f"MiB, {run.peaks.fds} fds, close {run.close_seconds:.1f} s"
    )


def part_a(
    workdir: str, count: int, concurrency: list[int], passivate: float | None, timeout_s: float
) -> list[SessionsRun]:
    runs: list[SessionsRun] = []
    for max_running in concurrency:
        progress(f"(a) example agent: {count} sessions, max_running_turns={max_running}")
        run = run_sessions(workdir, EXAMPLE, "example", count, max_running, passivate, timeout_s)
        progress("  " + _describe(run))
        runs.append(run)
    return runs


def part_b(
    workdir: str,
    count: int,
    concurrency: list[int],
    rounds: int,
    passivate: float | None,
    timeout_s: float,
) -> tuple[list[SessionsRun], dict[int, list[float]]]:
    agent = AgentSpec("noop-agent", noop_agent.command())
    runs: list[SessionsRun] = []
    store_rates: dict[int, list[float]] = {n: [] for n in concurrency}
    for r in range(rounds):
        for max_running in concurrency:
            store_run = run_control_plane(workdir, max_running, STORE_COMMANDS)
            store_rates[max_running].append(store_run.rate)
            run = run_sessions(workdir, agent, "noop", count, max_running, passivate, timeout_s)
            runs.append(run)
            progress(
                f"(b) round {r + 1}/{rounds}: store x{max_running} {store_run.rate:,.0f} cmd/s; "
                + _describe(run)
            )
    return runs, store_rates


# -- report ----------------------------------------------------------------------------------


def _mib(value: float) -> float:
    return value / (1024 * 1024)


def _sessions_entry(run: SessionsRun) -> dict[str, Any]:
    return asdict(run) | {"cmd_per_s": run.rate}


def summarise(
    a: list[SessionsRun] | None,
    b: tuple[list[SessionsRun], dict[int, list[float]]] | None,
    c: dict[str, Any] | None,
    config: dict[str, Any],
) -> dict[str, Any]:
    report: dict[str, Any] = {"config": config, "machine": machine_info()}
    if a is not None:
        report["example_agent"] = [_sessions_entry(r) for r in a]
    if b is not None:
        runs, store_rates = b
        entries: dict[str, Any] = {}
        for n, rates in store_rates.items():
            mine = [r for r in runs if r.max_running_turns == n]
            noop_rates = [r.rate for r in mine]
            entries[str(n)] = {
                "max_running_turns": n,
                "noop_median_cmd_per_s": median(noop_rates),
                "noop_min_max_cmd_per_s": spread(noop_rates),
                "store_median_cmd_per_s": median(rates),
                "store_min_max_cmd_per_s": spread(rates),
                "noop_vs_store": median(noop_rates) / median(rates),
                "median_own_rss_mib": median([_mib(r.peaks.own_rss) for r in mine]),
                "median_children_rss_mib": median([_mib(r.peaks.children_rss) for r in mine]),
                "median_peak_agents": median([float(r.peaks.children) for r in mine]),
                "median_peak_fds": median([float(r.peaks.fds) for r in mine]),
                "median_close_s": median([r.close_seconds for r in mine]),
                "runs": [_sessions_entry(r) for r in mine],
            }
        report["noop_agent"] = entries
    if c is not None:
        report["open_backlog"] = c
    report["peak_rss_mb"] = peak_rss_mb()
    return report


def _sessions_table(rows: list[tuple[str, SessionsRun | dict[str, Any]]]) -> None:
    header = (
        f"{'':<22}{'sessions':>9}{'cmd/s':>9}{'own RSS':>9}{'child RSS':>11}{'agents':>8}"
        f"{'fds':>7}{'close s':>9}  final states"
    )
    print(header)
    print("-" * (len(header) + 20))
    for label, run in rows:
        if isinstance(run, SessionsRun):
            run = _sessions_entry(run)
        peaks = run["peaks"]
        print(
            f"{label:<22}{run['sessions']:>9}{run['cmd_per_s']:>9.1f}"
            f"{_mib(peaks['own_rss']):>8.0f}M{_mib(peaks['children_rss']):>10.0f}M"
            f"{peaks['children']:>8}{peaks['fds']:>7}{run['close_seconds']:>9.1f}  "
            f"{run['states']}"
        )


def print_report(report: dict[str, Any]) -> None:
    cfg, mach = report["config"], report["machine"]
    print(
        f"actor runtime: sessions with one prompt each through ControlPlane (synchronous=FULL)\n"
        f"Python {mach['python']}, SQLite {mach['sqlite']}, {mach['cpus']} CPUs, "
        f"{mach['platform']}\n"
        f"passivate_after_s={cfg['passivate_after_s']}; cmd/s = sessions / (first spawn -> "
        f"last command final); RSS = peak of samples every 0.5 s (children = agents, summed)"
    )
    if "example_agent" in report:
        print()
        print(f"(a) example agent (python -m protocol.example_agent), {cfg['sessions']} sessions")
        rows = [(f"max_running_turns {r['max_running_turns']}", r) for r in report["example_agent"]]
        _sessions_table(rows)
    if "noop_agent" in report:
        print()
        print(
            f"(b) no-op raw JSON-RPC agent (python -I -S), {cfg['noop_sessions']} sessions, "
            f"{cfg['rounds']} round(s) interleaved with the store benchmark "
            f"({STORE_COMMANDS} enqueue->claim_next->complete commands, submitters = "
            f"max_running_turns)"
        )
        header = (
            f"{'max_running_turns':<19}{'no-op cmd/s':>12}{'min':>8}{'max':>8}"
            f"{'store cmd/s':>13}{'no-op/store':>13}{'own RSS':>9}{'child RSS':>11}"
            f"{'agents':>8}{'fds':>7}{'close s':>9}"
        )
        print(header)
        print("-" * len(header))
        for entry in report["noop_agent"].values():
            lo, hi = entry["noop_min_max_cmd_per_s"]
            print(
                f"{entry['max_running_turns']:<19}{entry['noop_median_cmd_per_s']:>12.1f}"
                f"{lo:>8.1f}{hi:>8.1f}{entry['store_median_cmd_per_s']:>13,.0f}"
                f"{entry['noop_vs_store']:>12.3f}x{entry['median_own_rss_mib']:>8.0f}M"
                f"{entry['median_children_rss_mib']:>10.0f}M{entry['median_peak_agents']:>8.0f}"
                f"{entry['median_peak_fds']:>7.0f}{entry['median_close_s']:>9.1f}"
            )
        for entry in report["noop_agent"].values():
            states = [r["states"] for r in entry["runs"]]
            print(f"  final states x{entry['max_running_turns']}: {states}")
    if "open_backlog" in report:
        c = report["open_backlog"]
        print()
        print(
            f"(c) ControlPlane.open with {c['sessions']:,} stored sessions and "
            f"{c['queued_commands']:,} queued commands ({c['file_mib']:.1f} MiB, built in "
            f"{c['build_seconds']:.1f} s); max_running_turns={c['max_running_turns']}, agent "
            f"never answers; {len(c['runs'])} round(s), medians"
        )
        lo, hi = c["min_max_open_ms"]
        phases = c["median_phase_ms"]
        lines = [
            ("open() -> return", f"{c['median_open_ms']:.0f} ms", f"min {lo:.0f}, max {hi:.0f}"),
            ("open() -> first slot grant", f"{c['median_first_grant_ms']:.0f} ms", ""),
            ("  Store.open (integrity check)", f"{phases['store_open_s']:.0f} ms", ""),
            ("  recover", f"{phases['recover_s']:.0f} ms", ""),
            ("  discover (queue the backlog)", f"{phases['discover_s']:.0f} ms", ""),
            (
                "one more discovery pass",
                f"{c['median_rediscover_ms']:.0f} ms",
                "the sweep thread repeats it every sweep_interval_s",
            ),
            (
                "close right after",
                f"{c['median_close_s']:.1f} s",
                f"actors started: at most {c['max_activations']}",
            ),
        ]
        for name, value, note in lines:
            print(f"  {name:<32}{value:>10}" + (f"  ({note})" if note else ""))
    print()
    print(f"peak RSS of this process (whole run): {report['peak_rss_mb']:.0f} MiB")


# -- command line ------------------------------------------------------------------------------


def _parts(text: str) -> set[str]:
    parts = {p.strip() for p in text.split(",") if p.strip()}
    if not parts or parts - {"a", "b", "c"}:
        raise argparse.ArgumentTypeError(f"parts are a, b, c; got {text!r}")
    return parts


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Sessions through ControlPlane with real agents (example and no-op), and "
        "ControlPlane.open with a large backlog."
    )
    parser.add_argument("--parts", type=_parts, default={"a", "b", "c"}, help="a,b,c (default all)")
    parser.add_argument(
        "--sessions",
        type=positive_int,
        default=None,
        help=f"(a) sessions per concurrency with the example agent (default {DEFAULT_SESSIONS})",
    )
    parser.add_argument(
        "--noop-sessions",
        type=positive_int,
        default=None,
        help=f"(b) sessions per run with the no-op agent (default {DEFAULT_SESSIONS})",
    )
    parser.add_argument(
        "--concurrency",
        type=positive_int_list,
        default=list(DEFAULT_CONCURRENCY),
        help="max_running_turns values for (a) and (b) (default 16,64)",
    )
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=None,
        help=f"(b) and (c) repetitions (default {DEFAULT_ROUNDS})",
    )
    parser.add_argument(
        "--open-sessions",
        type=positive_int,
        default=None,
        help=f"(c) stored sessions (default {DEFAULT_OPEN_SESSIONS})",
    )
    parser.add_argument(
        "--open-commands",
        type=positive_int,
        default=None,
        help=f"(c) queued commands (default {DEFAULT_OPEN_COMMANDS})",
    )
    parser.add_argument(
        "--passivate-after",
        type=float,
        default=None,
        help="RuntimeSettings.passivate_after_s for (a) and (b) (default: the product's, 300 s)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="give up on a run after this many seconds (default: 60 + 2 s per session)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke variant (~1-2 min): (a) 8 sessions, (b) 100 sessions x 1 round, "
        "(c) 2,000 sessions / 4,000 commands x 1 round",
    )
    parser.add_argument(
        "--dir", default=None, help="where to create the temporary directory (default /tmp)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    args = parser.parse_args(argv)
    quick = args.quick
    if args.sessions is None:
        args.sessions = 8 if quick else DEFAULT_SESSIONS
    if args.noop_sessions is None:
        args.noop_sessions = 100 if quick else DEFAULT_SESSIONS
    if args.rounds is None:
        args.rounds = 1 if quick else DEFAULT_ROUNDS
    if args.open_sessions is None:
        args.open_sessions = 2_000 if quick else DEFAULT_OPEN_SESSIONS
    if args.open_commands is None:
        args.open_commands = 4_000 if quick else DEFAULT_OPEN_COMMANDS
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dir is not None and not os.path.isdir(args.dir):
        print(f"--dir {args.dir}: no such directory", file=sys.stderr)
        return 2
    workdir = tempfile.mkdtemp(prefix="acp-actors-bench-", dir=args.dir)
    a: list[SessionsRun] | None = None
    b: tuple[list[SessionsRun], dict[int, list[float]]] | None = None
    c: dict[str, Any] | None = None
    try:
        if "c" in args.parts:
            c = part_c(workdir, args.open_sessions, args.open_commands, args.rounds)
        if "b" in args.parts:
            timeout = args.timeout or 60 + 2.0 * args.noop_sessions
            b = part_b(
                workdir,
                args.noop_sessions,
                args.concurrency,
                args.rounds,
                args.passivate_after,
                timeout,
            )
        if "a" in args.parts:
            timeout = args.timeout or 60 + 2.0 * args.sessions
            a = part_a(workdir, args.sessions, args.concurrency, args.passivate_after, timeout)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    config = {
        "parts": sorted(args.parts),
        "sessions": args.sessions,
        "noop_sessions": args.noop_sessions,
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "open_sessions": args.open_sessions,
        "open_commands": args.open_commands,
        "passivate_after_s": args.passivate_after
        if args.passivate_after is not None
        else RuntimeSettings().passivate_after_s,
        "quick": args.quick,
        "dir": workdir,
    }
    report = summarise(a, b, c, config)
    if args.json:
        json.dump(report, sys.stdout, indent=2, default=str)
        print()
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
