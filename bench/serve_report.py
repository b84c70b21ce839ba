"""The report of bench/serve_overhead.py: its tables and the verdicts against the targets,
printed from the JSON report (what ``--json`` prints), and the names of its sides."""

from __future__ import annotations

from typing import Any

from bench import relay_sides, serve_batch
from bench._common import print_turn_table

SERVE = "serve"
DIRECT = "direct"
LABELS = {
    SERVE: "acpctl serve (store)",
    DIRECT: "SDK client -> agent",
    **relay_sides.LABELS,
}
# The 100-update example turn through serve, against the durable C relay timed in the same
# rounds (relay_sides.DURABLE): at most this ratio.
TURN_TARGET_RATIO = 1.15
# Start to session ready (process start, initialize, session/new answered), serve / direct,
# by backend agent.
READY_TARGET_RATIOS = {"example agent": 1.4, "claude": 1.25, "gemini": 1.25, "codex": 1.25}


def print_report(report: dict[str, Any]) -> None:
    cfg, mach = report["config"], report["machine"]
    configured = cfg.get("read_coalesce_ms")
    coalesce = "the default" if configured is None else f"{configured:g}"
    print(
        f"acpctl serve overhead: one '#chunks={cfg['chunks']}' turn of the example agent\n"
        f"{cfg['turns']} timed turns per side (+{cfg['warmup']} warm-up), interleaved; "
        f"serve's read_coalesce_ms: {coalesce}\n"
        f"Python {mach['python']}, SQLite {mach['sqlite']}, {mach['cpus']} CPUs, "
        f"{mach['platform']}"
    )
    print()
    turns = report["turns"]
    print_turn_table(turns["sides"], "direct")
    ready, first = turns["ready_s"], turns["first_warmup_turn_ms"]
    print(
        f"start to session ready: serve {ready[SERVE]:.2f} s, direct {ready[DIRECT]:.2f} s; "
        f"first (untimed) turn: serve {first.get(SERVE, float('nan')):.0f} ms "
        f"(may wait for its backend agent, started at session/new), "
        f"direct {first.get(DIRECT, float('nan')):.0f} ms"
    )
    ready_report = report.get("ready")
    if ready_report is not None:
        verdict = "MET" if ready_report["target"]["met"] else "NOT MET"
        print(
            f"start to session ready, {ready_report['backend']} "
            f"({ready_report['rounds']} fresh processes per side, "
            f"interleaved; the store already knows the agent's capabilities): serve "
            f"{ready_report['median_serve_s']:.2f} s, direct "
            f"{ready_report['median_direct_s']:.2f} s (medians) = "
            f"{ready_report['ratio_of_medians']:.2f}x (paired "
            f"{ready_report['median_paired_ratio']:.2f}x); target <= "
            f"{ready_report['target']['max_ratio']:.2f}x: {verdict}. First serve of a new "
            f"store: {ready_report['first_serve_s']:.2f} s"
        )
        with_mcp = ready_report.get("direct_with_mcp")
        if with_mcp is not None:
            print(
                f"  the agent directly with an always-ready HTTP MCP server to connect to: "
                f"{with_mcp['median_s']:.2f} s ({with_mcp['ratio']:.2f}x direct without)"
            )
        floor = ready_report.get("floor")
        if floor is not None:
            print(
                f"  floor in the same rounds: serve's own imports (python -c 'import "
                f"control_plane.serve.run') {floor['median_s']:.2f} s; serve cannot be ready "
                f"before them nor before its agent: at best {floor['ratio']:.2f}x direct"
            )
            tools = floor.get("with_tools")
            if tools is not None:
                print(
                    f"  with the MCP server's imports too (what an agent that waits for its "
                    f"MCP servers at session/new waits for): {tools['median_s']:.2f} s, at "
                    f"best {tools['ratio']:.2f}x direct"
                )
    cpu = turns["cpu_ms_per_turn"]
    if cpu:
        print(
            "CPU per timed turn (user+sys, /proc; the client is this process, shared): "
            f"acpctl serve {cpu.get(SERVE, float('nan')):.1f} ms + its backend agent "
            f"{cpu.get(SERVE + '_backend', float('nan')):.1f} ms; "
            f"direct agent {cpu.get(DIRECT, float('nan')):.1f} ms"
        )
    for relay in relay_sides.RELAYS:
        if relay in cpu:
            print(
                f"  {LABELS[relay]}: {cpu[relay]:.1f} ms + its agent "
                f"{cpu.get(relay + '_backend', float('nan')):.1f} ms"
            )
    commits = turns.get("commits_per_turn")
    if commits is not None:
        print(
            f"store commits per timed turn (counted: serve's acpctl_store_commit_seconds_count): "
            f"{commits:.2f}"
        )
    latency = turns.get("update_latency_ms", {})
    if SERVE in latency and DIRECT in latency:
        serve_l, direct_l = latency[SERVE], latency[DIRECT]
        print(
            f"per update, agent write to client read ({serve_l['n']} updates per side): "
            f"serve median {serve_l['median']:.2f} ms, p99 {serve_l['p99']:.2f} ms; direct "
            f"median {direct_l['median']:.2f} ms, p99 {direct_l['p99']:.2f} ms; added by serve: "
            f"median {serve_l['median'] - direct_l['median']:.2f} ms, "
            f"p99 {serve_l['p99'] - direct_l['p99']:.2f} ms"
        )
    for relay in relay_sides.RELAYS:
        if relay in latency and DIRECT in latency:
            print(
                f"  {LABELS[relay]}: median {latency[relay]['median']:.2f} ms, "
                f"p99 {latency[relay]['p99']:.2f} ms"
            )
    handoffs = report.get("handoffs")
    if handoffs:
        print(
            f"thread hand-offs per turn inside serve (counted over {handoffs['turns']} "
            f"untimed turns, bench/handoffs.py): {handoffs['per_turn']:.1f}"
        )
        for label, count in handoffs["breakdown"].items():
            if count >= 0.5:
                print(f"  {count:7.1f}  {label}")
        by_thread = handoffs.get("cpu_ms_per_turn_by_thread")
        if by_thread:
            total = sum(ms.get("all", 0.0) for ms in by_thread.values())
            print(
                f"serve's CPU per turn by thread (same {handoffs['turns']} counted turns, "
                f"/proc): {total:.2f} ms"
            )
            for thread, ms in by_thread.items():
                if ms.get("all", 0.0) >= 0.05:
                    print(f"  {ms['all']:7.2f} ms  {thread} (kernel {ms.get('system', 0.0):.2f})")
    target = turns["target"]
    if target.get("ratio") is None:
        print(
            f"target: serve <= {target['max_ratio']:.2f}x the durable C relay: not measured "
            f"({target.get('why')})"
        )
    else:
        verdict = "MET" if target["met"] else "NOT MET"
        print(
            f"target: serve <= {target['max_ratio']:.2f}x the durable C relay of the same "
            f"rounds: {verdict} ({target['ratio']:.3f}x)"
        )
    sides = turns["sides"]
    floors = [sides[n] for n in ("relay-c", "relay-c-durable") if n in sides]
    if floors:  # serve against the floors measured in the same rounds
        serve_ms = sides[SERVE]["median_ms"]
        print(
            "serve against the floors of this run: "
            + "; ".join(
                f"{entry['label']} {entry['ratio_of_medians']:.3f}x the direct client, "
                f"serve {serve_ms / entry['median_ms']:.3f}x it"
                for entry in floors
            )
        )
    batch = report.get("batch")
    if batch is not None:
        serve_batch.print_batch(batch)
    print(f"peak RSS (this process): {report['peak_rss_mb']:.0f} MiB")
